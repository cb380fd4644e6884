"""FlashAttention-4 (``flash-attn-4``, CuTe DSL) as the FA core, with ``out=`` into any strided tensor.

The public ``flash_attn.cute.flash_attn_func`` has no ``out=``; the private
``flash_attn.cute.interface._flash_attn_fwd`` (4.0.0b36: returns ``(out, lse, p, row_max, o_lo)``) has
it, and ``tile_mn``. Being private it may change between betas: this module is the one place that
calls it. Imports are lazy (the ``[gpu]`` extra; nothing here imports on a CPU-only machine until
``load`` is called). On SM90 (H200) FA4 runs ``FlashAttentionForwardSm90``: 128×128 tiles for
d = 128, one tile per CTA (``SingleTileScheduler``), O stored by one TMA bulk store per tile.

Layouts are FA4's: q, k, v, out are ``(batch, seq, heads, head_dim)``.
"""

import math

from xstage.errors import InputError
from xstage.provenance import distribution_versions
from xstage.hw.attention.fa4_layout import check_out_layout

DISTRIBUTIONS = ("flash-attn-4", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-cu13",
                 "quack-kernels", "apache-tvm-ffi", "torch-c-dlpack-ext", "cuda-bindings", "cupy-cuda13x")


def versions() -> dict:
    """Installed versions of the FA4 stack (None for a missing distribution)."""
    return distribution_versions(DISTRIBUTIONS)


def check_qkv(q, k, v) -> None:
    """Shapes and dtypes FA4's forward takes here (batch 1 or more, non-causal, bf16/fp16)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise InputError(f"{name} shape", tuple(t.shape), "must be (batch, seq, heads, head_dim)")
        if str(t.dtype) not in ("torch.bfloat16", "torch.float16"):
            raise InputError(f"{name} dtype", str(t.dtype), "must be bfloat16 or float16")
        if t.stride(-1) != 1:
            raise InputError(f"{name} strides", tuple(t.stride()), "must have a contiguous last dim")
    if k.shape[:3] != v.shape[:3] or k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]:
        raise InputError("k/v shape", (tuple(k.shape), tuple(v.shape)), f"must match q {tuple(q.shape)} in batch and heads")
    if q.shape[-1] != k.shape[-1]:
        raise InputError("head_dim", (q.shape[-1], k.shape[-1]), "must be equal for q and k")


def check_tile_mn(tile_mn):
    if tile_mn is None:
        return None
    tile_mn = tuple(int(x) for x in tile_mn)
    if len(tile_mn) != 2 or any(x < 16 or x % 16 for x in tile_mn):
        raise InputError("tile_mn", tile_mn, "must be two multiples of 16 (block_m, block_n)")
    return tile_mn


class Fa4:
    """``forward(q, k, v, out, tile_mn=None) -> out``: FA4's forward written into ``out`` (checked first).

    ``impl``: the function with ``_flash_attn_fwd``'s signature (tests pass a CPU stand-in);
    ``scheduler``: "single" (FA4's own) or "persistent" (see ``patch_sm90_persistent``)."""

    def __init__(self, impl, scheduler: str = "single"):
        self.impl, self.scheduler = impl, scheduler

    def forward(self, q, k, v, out, tile_mn=None):
        check_qkv(q, k, v)
        check_out_layout(out, q, v)
        kw = {"tile_mn": check_tile_mn(tile_mn)} if tile_mn is not None else {}
        res = self.impl(q, k, v, causal=False, out=out, **kw)
        return res[0] if isinstance(res, tuple) else res

    __call__ = forward


def patch_sm90_persistent() -> None:
    """EXPERIMENT: make FA4's SM90 forward use its (SM100-era) ``StaticPersistentTileScheduler`` instead of
    ``SingleTileScheduler``: grid = #SMs, each CTA loops tiles ``t, t + grid, …``. The SM90 producer and
    consumer loops already iterate ``while work_tile.is_valid_tile``; ``FlashAttentionForwardSm90.__call__``
    reads the module global at trace time, so this must run before the first compile. Measured: WRONG results
    (FA4 releases the Q pipeline before its epilogue and sO aliases sQ, so the next tile's Q load races the
    O store); the correct persistent kernel is ``load_persistent`` (``fa4_persistent``)."""
    import flash_attn.cute.flash_fwd_sm90 as m90
    from flash_attn.cute.tile_scheduler import StaticPersistentTileScheduler

    m90.SingleTileScheduler = StaticPersistentTileScheduler


def load(persistent: bool = False) -> Fa4:
    """The FA4 forward of the installed flash-attn-4 (RuntimeError naming what is missing otherwise)."""
    try:
        from flash_attn.cute.interface import _flash_attn_fwd
    except ImportError as err:
        raise RuntimeError(f"flash-attn-4 is not importable ({err}); install the [gpu] extra "
                           "(on the lent H200: shared/DEVICE-WHEELS.md)") from None
    if persistent:
        patch_sm90_persistent()
    return Fa4(_flash_attn_fwd, "persistent" if persistent else "single")


PERSISTENT_SCHEDULER = "persistent-sepO"  # the scheduler label of PersistentSm90's records (fa4_persistent)


def load_persistent(kernel: str = "drain", rank: int = 0, world: int = 8, tile_log=None) -> Fa4:
    """``PersistentSm90`` (``xstage.hw.attention.fa4_persistent``): FA4's SM90 forward made persistent, sO apart
    from sQ, each tile's O store drained behind the next tile's mainloop (``kernel`` "drain"; "stagger"; the
    diagnostics "waitend", "lsu"; the ``PLANS`` "drain1" (stock one-tile grid), "drainll" / "staggerll" (this
    rank's own chunk last: ``rank``, ``world``), "staggersplit" (staggerll with its last partial wave split along
    K/V and merged in the kernel)); the same ``Fa4`` interface, its scheduler label saying which. ``tile_log``:
    an int64 CUDA tensor the kernel's per-CTA tile timers are written to (``fa4_tile_log``; default off)."""
    from xstage.hw.attention.fa4_persistent import forward_impl, resolve

    label = {"static": PERSISTENT_SCHEDULER, "single": "single-sepO",
             "local_last": f"{PERSISTENT_SCHEDULER}-locallast", "dynamic": f"{PERSISTENT_SCHEDULER}-dynamic",
             "local_last_dynamic": f"{PERSISTENT_SCHEDULER}-locallast-dynamic",
             "local_last_split": f"{PERSISTENT_SCHEDULER}-locallast-split"}[resolve(kernel)[1]]
    return Fa4(forward_impl(load().impl, kernel=kernel, rank=rank, world=world, tile_log=tile_log), label)


def sdpa_cudnn(q, k, v):
    """torch SDPA with the cuDNN backend on FA4-layout tensors; returns a ``(B, S, H, d)`` view."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return o.transpose(1, 2)


def reference_rows(q, k, v, r0: int, r1: int):
    """float32 attention of query rows [r0, r1) of batch 0: ``(r1 - r0, H, d)`` (TF32 left to the caller)."""
    import torch

    qs = q[0, r0:r1].float().transpose(0, 1)
    kf, vf = k[0].float().transpose(0, 1), v[0].float().transpose(0, 1)
    p = torch.softmax(torch.matmul(qs, kf.transpose(1, 2)) * (1.0 / math.sqrt(q.shape[-1])), dim=-1)
    return torch.matmul(p, vf).transpose(0, 1)


def err_vs_ref(rows, ref, atol: float = 1e-3, rtol: float = 1e-2) -> dict:
    """max |rows − ref|, ‖rows − ref‖ / ‖ref‖; ok within ``atol + rtol·max|ref|`` and NaN-free."""
    d = rows.float() - ref
    e, amax = float(d.abs().max()), float(ref.abs().max())
    rel = float(d.norm() / ref.norm())
    return {"max_abs_err": e, "rel_err": rel, "ref_absmax": amax,
            "ok": (not math.isnan(e)) and e <= atol + rtol * amax}
