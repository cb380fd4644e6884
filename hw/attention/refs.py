"""References, destinations and Serial-best's transfer for the FlashAttention–A2A kernels (``xstage.hw.attention.kernel``).

- ``reference_attention``: float32 torch SDPA, what every kernel output is compared with (``compare``).
- ``sdpa``: bf16 torch SDPA with one backend (cuDNN, flash, ...): Serial-best's attention.
- ``ce_transfer``: copy-engine 2-D copies of each rank's rows into its destination buffer: Serial-best's
  transfer on one GPU.
- ``Destinations``: the W destination buffers of one sender and their device pointer table (emulated
  on one GPU: host-mapped pinned buffers; or all in device memory), poisoned before and checked after
  every run.

GPU imports happen inside the functions, so the module imports without torch.
"""

from xstage.errors import InputError
from xstage.sim.workloads.a2a_layout import A2ALayout


def reference_attention(q, k, v):
    """float32 torch SDPA of (M, H, d) inputs → (M, H, d) float32."""
    import torch.nn.functional as F

    qf, kf, vf = (t.float().permute(1, 0, 2).unsqueeze(0) for t in (q, k, v))
    return F.scaled_dot_product_attention(qf, kf, vf)[0].permute(1, 0, 2)


def sdpa(q, k, v, backend: str = "cudnn"):
    """bf16 torch SDPA with one backend ("cudnn", "flash", "efficient", "math") → (M, H, d) view."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    if backend not in backends:
        raise InputError("backend", backend, f"must be one of {sorted(backends)}")
    with sdpa_kernel(backends[backend]):
        out = F.scaled_dot_product_attention(*(t.permute(1, 0, 2).unsqueeze(0) for t in (q, k, v)))
    return out[0].permute(1, 0, 2)


def ce_transfer(o, dests, stream=None) -> None:
    """Serial-best's transfer: copy-engine 2-D copies of each rank's rows of ``o`` (M, H, d, any row
    and head strides, contiguous d) into its destination buffer (one copy per rank, or per rank and
    head when heads are not adjacent in ``o``)."""
    import torch

    from xstage.hw.common.hostmap import memcpy2d_async

    lay = dests.layout
    es = o.element_size()
    stream = int(stream if stream is not None else torch.cuda.current_stream().cuda_stream)
    dpitch = lay.heads_total * lay.head_dim * es
    merged = o.stride(1) == lay.head_dim and o.stride(2) == 1
    for j, dst in enumerate(dests.pointers):
        rows = o[j * lay.chunk_rows:(j + 1) * lay.chunk_rows]
        if merged:
            memcpy2d_async(dst + lay.rank * lay.heads * lay.head_dim * es, dpitch, rows.data_ptr(),
                           o.stride(0) * es, lay.heads * lay.head_dim * es, lay.chunk_rows, stream)
            continue
        for h in range(lay.heads):
            memcpy2d_async(dst + (lay.rank * lay.heads + h) * lay.head_dim * es, dpitch, rows[:, h].data_ptr(),
                           o.stride(0) * es, lay.head_dim * es, lay.chunk_rows, stream)


class Destinations:
    """The W destination buffers (M/W, W*H, d) of one sender and their device pointer table."""

    def __init__(self, layout: A2ALayout, buffers: list, pointers: list, device):
        import torch

        if len(buffers) != layout.world_size or len(pointers) != layout.world_size:
            raise InputError("destinations", len(buffers), f"must be {layout.world_size} buffers")
        self.layout, self.buffers, self.pointers = layout, buffers, [int(p) for p in pointers]
        bad = [hex(p) for p in self.pointers if p % 16]
        if bad:  # the kernels store 16-byte vectors
            raise InputError("destination pointers", bad, "must be 16-byte aligned")
        self.table = torch.tensor(self.pointers, dtype=torch.int64, device=device)

    @classmethod
    def emulated(cls, layout: A2ALayout, device) -> "Destinations":
        """One GPU: the self chunk in device memory, the W-1 remote ones host-mapped pinned memory."""
        import torch

        from xstage.hw.common.hostmap import pinned_buffer

        device = torch.device(device)
        buffers, pointers = [], []
        for j in range(layout.world_size):
            if j == layout.rank or device.type != "cuda":
                t = torch.empty(layout.dest_shape, dtype=torch.bfloat16, device=device)
                ptr = t.data_ptr()
            else:
                t, ptr = pinned_buffer(layout.dest_shape, torch.bfloat16)
            buffers.append(t)
            pointers.append(ptr)
        return cls(layout, buffers, pointers, device)

    @classmethod
    def in_device_memory(cls, layout: A2ALayout, device) -> "Destinations":
        """All W buffers in this GPU's memory: the fused kernel's stores never leave the device (a
        diagnostic: the kernel's own cost, without the remote path)."""
        import torch

        buffers = [torch.empty(layout.dest_shape, dtype=torch.bfloat16, device=device)
                   for _ in range(layout.world_size)]
        return cls(layout, buffers, [b.data_ptr() for b in buffers], device)

    def poison(self) -> None:
        for b in self.buffers:
            b.fill_(float("nan"))

    def check(self, ref) -> dict:
        """Compare the sender's columns with ``ref`` (M, H, d); count unwritten and stray elements."""
        import torch

        lay = self.layout
        own = lay.sender_slice()
        got = torch.cat([b[own].to(ref.device, torch.float32) for b in self.buffers], dim=0)
        unwritten = int(torch.isnan(got).sum())
        stray = 0
        for b in self.buffers:  # other senders' columns must keep their poison
            mask = torch.ones(lay.heads_total, dtype=torch.bool)
            mask[own[1]] = False
            stray += int((~torch.isnan(b[:, mask.to(b.device)].float())).sum())
        res = compare(got, ref)
        return {**res, "unwritten": unwritten, "stray": stray, "ok": unwritten == 0 and stray == 0 and res["ok"]}


def compare(out, ref, rtol: float = 1e-2) -> dict:
    """Norm-wise relative error of ``out`` against ``ref`` and the worst element; ok when ≤ rtol."""
    import torch

    out, ref = out.float(), ref.float().to(out.device)
    finite = bool(torch.isfinite(out).all())
    rel = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)) if finite else float("inf")
    max_abs = float((out - ref).abs().max()) if finite else float("inf")
    return {"rel_err": rel, "max_abs_err": max_abs, "ok": finite and rel <= rtol}
