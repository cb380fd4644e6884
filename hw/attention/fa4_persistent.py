"""A persistent FA4 SM90 forward whose tile-end O stores drain behind the next tile's mainloop.

FA4 4.0.0b36's SM90 forward (``flash_attn.cute.flash_fwd_sm90.FlashAttentionForwardSm90``) runs one
128×128 tile per CTA (``SingleTileScheduler``). Its epilogue writes O into shared memory that aliases sQ
and has one warp (warp 4) issue a TMA bulk store and wait until the store has *read* that memory
(``cp_async_bulk_wait_group(0, read=True)``): over PCIe the store is backpressured, so the SM waits,
and a CTA cannot exit (nor the next wave start) before its 32 KiB have left shared memory.

Why FA4's own persistent scheduler alone gives wrong results (the earlier ``patch_sm90_persistent``):
the consumer releases the Q pipeline *before* the epilogue ("so the producer can load the next tile's
Q"), and sO is sQ; with a next tile, the producer's Q load lands in the buffer the epilogue is writing
and the TMA store is reading.

``PersistentSm90`` (a subclass; only these methods are ours, everything else is FA4's):
- ``_get_shared_storage_cls``: the same storage with the sQ range doubled (+32 KiB for d = 128): its
  second half is sO, no longer aliased with sQ;
- ``mma``: hands FA4's consumer loop that separate sO, and after the loop waits for the last store's read
  (a CTA must not exit while a bulk store still reads its shared memory);
- ``epilogue``: FA4's TMA-O epilogue with the read-wait moved from after the store to just before the
  next epilogue writes sO — a tile's store drains during the next tile's whole mainloop.
``PersistentSm90Stagger`` (kernel "stagger") adds the send shaping: the epilogue only stages the tile in sO and
the store warp issues its TMA store at K/V step 1 + (b mod 16)·n/32 of the CTA's next mainloop (a hook on
FA4's per-K/V-step method), so the CTAs' sends spread over half a Q-loop instead of landing together.
Measured (docs/attention.md, data/attention-fa4/pers1-4): "drain" alone hides nothing more than stock FA4;
"stagger" halves the residual at 16K/32K. The tile scheduler is FA4's ``StaticPersistentTileScheduler``
(grid = #SMs, CTA b takes tiles b, b + grid, …).

Installed by rebinding, only while one of our calls runs (``installed``): FA4's interface builds
``FlashAttentionForwardSm90`` and ``FlashAttentionForwardSm90.__call__`` reads the module global
``SingleTileScheduler`` at trace time; our calls use their own compile cache, because FA4's compile key
does not name the class. Stock FA4 calls in the same process are unaffected. Lazily imported (the
``[gpu]`` extra); covers what this project runs: dense, non-causal, no LSE output, no pack-GQA, no varlen.
"""

import contextlib

SCHEDULERS = ("static",)  # FA4's StaticPersistentTileScheduler
# "drain": PersistentSm90 (the kernel); "stagger": its send staggered across CTAs into the next mainloop;
# the diagnostics, to tell why a drain does or does not hide the stores: "waitend" (FA4's epilogue: the
# read-wait right after the store) and "lsu" (FA4's non-TMA epilogue)
KERNELS = ("drain", "waitend", "lsu", "stagger")


def kernel_class(kernel: str = "drain"):
    """The subclass of FA4's ``FlashAttentionForwardSm90`` (imports the CuTe DSL on first use)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel {kernel!r} is not one of {KERNELS}")
    from xstage.hw.attention.fa4_persistent_kernel import KERNELS as classes

    return classes[kernel]


_CACHE = {}


@contextlib.contextmanager
def installed(scheduler: str = "static", kernel: str = "drain"):
    """FA4's interface builds ``kernel_class(kernel)`` with the persistent scheduler, from our own compile cache."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler {scheduler!r} is not one of {SCHEDULERS}")
    cls = kernel_class(kernel)
    import flash_attn.cute.flash_fwd_sm90 as m90
    import flash_attn.cute.interface as fi
    from flash_attn.cute.cache_utils import get_jit_cache
    from flash_attn.cute.tile_scheduler import StaticPersistentTileScheduler

    cache = _CACHE.setdefault((scheduler, kernel), get_jit_cache(f"fwd-xstage-persistent-{scheduler}-{kernel}"))
    saved = fi.FlashAttentionForwardSm90, m90.SingleTileScheduler, fi._flash_attn_fwd.compile_cache
    fi.FlashAttentionForwardSm90, m90.SingleTileScheduler = cls, StaticPersistentTileScheduler
    fi._flash_attn_fwd.compile_cache = cache
    try:
        yield cls
    finally:
        fi.FlashAttentionForwardSm90, m90.SingleTileScheduler, fi._flash_attn_fwd.compile_cache = saved


def forward_impl(fwd, scheduler: str = "static", kernel: str = "drain"):
    """``fwd`` (``_flash_attn_fwd``'s signature) run with ``kernel_class(kernel)`` installed; refuses an LSE
    output (our epilogue writes none)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel {kernel!r} is not one of {KERNELS}")

    def run(q, k, v, **kw):
        if kw.get("return_lse") or kw.get("lse") is not None:
            raise ValueError("PersistentSm90 writes no LSE (return_lse / lse are not supported)")
        with installed(scheduler, kernel):
            return fwd(q, k, v, **kw)
    return run
