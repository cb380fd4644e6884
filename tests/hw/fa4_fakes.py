"""CPU stand-ins for the FA4 tests: torch.cuda streams/events, the copy engine, FA4 and cuDNN SDPA.

``fake_cuda(monkeypatch)`` makes ``Fa4Case`` run on CPU tensors: streams run in issue order, copies are
``ctypes.memmove`` row by row, FA4 is float32 SDPA written into ``out`` after FA4's own ``out=`` checks
(``Fa4.forward`` runs them)."""

import contextlib
import ctypes

import torch
import torch.nn.functional as F


class Event:
    def __init__(self, enable_timing=False):
        pass

    def record(self, stream=None):
        pass


class Stream:
    cuda_stream = 0

    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass


def memcpy2d(dst, dpitch, src, spitch, width, height, stream):
    assert dst % 2 == 0 and src % 2 == 0 and width <= dpitch and width <= spitch
    for i in range(height):
        ctypes.memmove(dst + i * dpitch, src + i * spitch, width)


def sdpa_impl(q, k, v, causal=False, out=None, tile_mn=None, skip_last_row=False):
    """FA4's _flash_attn_fwd on CPU: per batch float32 attention into ``out``."""
    assert not causal
    for b in range(q.shape[0]):
        o = F.scaled_dot_product_attention(q[b].transpose(0, 1).float(), k[b].transpose(0, 1).float(),
                                           v[b].transpose(0, 1).float()).transpose(0, 1).to(out.dtype)
        if skip_last_row:
            o, dst = o[:-1], out[b, :-1]
        else:
            dst = out[b]
        dst.copy_(o)
    return out, None, None, None, None


def sdpa_cudnn(q, k, v):
    return F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                          v.transpose(1, 2).float()).to(q.dtype).transpose(1, 2)


class Buffer:
    def __init__(self, nbytes, dtype, *rest):
        self.tensor = torch.empty(nbytes // 2, dtype=dtype)
        self.how, self.wrap, self.ptr, self.dptr = "cpu", "cpu", 0, 0

    def free(self):
        self.tensor = None


def fake_cuda(monkeypatch):
    from xstage.hw.attention import fa4_variants
    from xstage.hw.common import hostmap

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(hostmap, "memcpy2d_async", memcpy2d)
    monkeypatch.setattr(fa4_variants, "sdpa_cudnn", sdpa_cudnn)


class MixedBuffer(Buffer):
    """``vmm_alloc(chunk_bytes, W, rank, dtype)`` stand-in: W chunks in one tensor."""

    def __init__(self, chunk_bytes, world, local, dtype):
        super().__init__(chunk_bytes * world, dtype)
        self.host_kind, self.granularity, self.attrs = "cpu", 2 << 20, {}
