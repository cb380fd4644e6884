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
Measured (docs/attention/fa4-persistent.md, data/attention-fa4/pers1-4): "drain" alone hides nothing more than stock FA4;
"stagger" halves the residual at 16K/32K. The tile scheduler is FA4's ``StaticPersistentTileScheduler``
(grid = #SMs, CTA b takes tiles b, b + grid, …; tile t is m-block t mod (M/128) of head t div (M/128), the
same order as the stock grid's block index), or, as diagnostic and send-order levers (``PLANS``): the stock
one-tile grid under our kernel ("drain1": the +32 KiB and our epilogue without persistence), and the same
static scheduler over a permuted tile order that leaves this rank's own-chunk tiles (local stores) for last
("local_last": ``local_last_tile``; the Triton kernel's LOCAL_LAST), so the final wave carries fewer remote bytes.
``PersistentSm90Split`` (kernel "staggersplit", ``fa4_split_kernel``, scheduler "local_last_split"): when the
last partial wave holds more remote tiles than the own chunk can cover (M = 16K: 384 tiles on 132 CTAs leave 120,
72 of them remote, whose 2.4 MB drain after the compute ends), no order of whole tiles helps; its tiles are split
along K/V into a partner and an owner unit on neighbouring CTAs (``split_plan`` / ``split_unit``), which run side
by side; the owner merges the partner's normalised O and row LSEs from a global workspace in its epilogue (no
extra kernel) and stores through the stagger epilogue: most remote tiles end half a wave before the kernel does.
"staggersplitw" also spreads each staged tile's send over its CTA's window until it next stages one (through the
partner units): the split's half-length units would otherwise squeeze the last whole wave's sends into a quarter
of a tile (measured: docs/attention/fa4-persistent.md, "The split last wave").

Installed by rebinding, only while one of our calls runs (``installed``): FA4's interface builds
``FlashAttentionForwardSm90`` and ``FlashAttentionForwardSm90.__call__`` reads the module global
``SingleTileScheduler`` at trace time; our calls use their own compile cache, because FA4's compile key
does not name the class. Stock FA4 calls in the same process are unaffected. Lazily imported (the
``[gpu]`` extra); covers what this project runs: dense, non-causal, no LSE output, no pack-GQA, no varlen.
"""

import contextlib

SCHEDULERS = ("static", "single", "local_last", "dynamic", "local_last_dynamic", "local_last_split")  # FA4's
# StaticPersistentTileScheduler; FA4's own one-tile grid; the static scheduler over local_last_tile's order; each
# CTA's next tile from an atomic counter (fa4_schedulers: LocalLastScheduler, DynamicScheduler); both; the
# local-last order with its last partial wave split along K/V (split_unit; the SPLIT_KERNELS only)
# "drain": PersistentSm90 (the kernel); "stagger": its send staggered across CTAs into the next mainloop;
# the diagnostics, to tell why a drain does or does not hide the stores: "waitend" (FA4's epilogue: the
# read-wait right after the store) and "lsu" (FA4's non-TMA epilogue)
# "stagger1": the sends spread over the whole next mainloop, not its first half; "staggersplit" / "staggersplit1":
# stagger / stagger1 + the split last wave's in-kernel merge (fa4_split_kernel; scheduler local_last_split only)
# "staggersplitw": the split kernel with each send spread over its CTA's window until it next stages a tile
KERNELS = ("drain", "waitend", "lsu", "stagger", "stagger1", "staggersplit", "staggersplit1", "staggersplitw")
SPLIT_KERNELS = ("staggersplit", "staggersplit1", "staggersplitw")
# further names the bench and smoke take (pfa4_<name>, fused_vmm_pers_<name>): (kernel, scheduler)
PLANS = {"drain1": ("drain", "single"), "drainll": ("drain", "local_last"), "staggerll": ("stagger", "local_last"),
         "draindyn": ("drain", "dynamic"), "staggerdyn": ("stagger", "dynamic"),
         "staggerlldyn": ("stagger", "local_last_dynamic"), "staggerll1": ("stagger1", "local_last"),
         "staggersplit": ("staggersplit", "local_last_split"), "staggersplit1": ("staggersplit1", "local_last_split"),
         "staggersplitw": ("staggersplitw", "local_last_split")}
MAX_TILES = (1 << 20) - 1024  # the dynamic scheduler's ring word holds tile + grid in 20 bits (fa4_schedulers)
NAMES = KERNELS + tuple(p for p in PLANS if p not in KERNELS)


def resolve(name: str, scheduler: str = "static") -> tuple:
    """(kernel, scheduler) of a kernel name or a ``PLANS`` name (whose scheduler wins)."""
    if name in PLANS:
        return PLANS[name]
    if name not in KERNELS:
        raise ValueError(f"kernel {name!r} is not one of {NAMES}")
    return name, scheduler


def local_last_tile(t: int, blocks: int, heads: int, batch: int, rank: int, world: int) -> tuple:
    """(m_block, head, batch) of the t-th tile in the local-last order: first every (batch, head)'s m-blocks
    outside rank ``rank``'s chunk (blocks // world m-blocks from rank·chunk; head-major, m-block fastest, as
    FA4's order), then the own chunk's. The reference of the kernel's scheduler (same integer arithmetic)."""
    chunk = blocks // world
    remote, own = blocks - chunk, rank * chunk
    if t < remote * heads * batch:
        hb, j = divmod(t, remote)
        block = j + chunk if j >= own else j
    else:
        hb, j = divmod(t - remote * heads * batch, chunk)
        block = own + j
    b, h = divmod(hb, heads)
    return block, h, b


SPLIT_PARTS = 2  # a split tile's K/V range in two halves (FA4's BlockInfo split arithmetic, packed split word)
SPLIT_THREADS, SPLIT_WORDS = 256, 67  # per pair slot and consumer thread: 64 fp32 of O, 2 row LSEs, 1 flag (d = 128)


def split_plan(tiles: int, sms: int) -> tuple:
    """(whole, split, units, grid) of the split-last-wave schedule: the first ``whole`` tiles (full waves of the
    local-last order) stay whole; the ``split`` = tiles mod sms tiles of the last partial wave become two units
    each (``split_unit``); ``units`` = whole + 2·split over a grid of min(sms, units) CTAs (grid-stride)."""
    if tiles < 1 or sms < 2:
        raise ValueError(f"split_plan: tiles {tiles} / sms {sms} (needs tiles >= 1, sms >= 2)")
    split = tiles % sms
    whole = tiles - split
    units = whole + SPLIT_PARTS * split
    return whole, split, units, min(sms, units)


def split_word(parts: int, idx: int) -> int:
    """FA4's packed split index (``BlockInfo`` with ``pack_split_idx``): parts << 16 | idx."""
    return parts << 16 | idx


def split_unit(u: int, whole: int) -> tuple:
    """(tile, split word, pair) of unit u (the kernel's scheduler does the same integer arithmetic): units below
    ``whole`` are tile u whole (pair -1); then unit whole + 2i is the partner of pair i (K/V half 0: writes its
    normalised O and row LSEs to the pair's slot, then its flag) and whole + 2i + 1 the owner (half 1: waits for the
    flag, merges, stores tile whole + i). Partner index < owner index, on the next CTA: with every CTA resident
    no owner waits for a unit that could wait for it."""
    if u < whole:
        return u, split_word(1, 0), -1
    pair, half = divmod(u - whole, SPLIT_PARTS)
    return whole + pair, split_word(SPLIT_PARTS, half), pair


def split_window(u: int, whole: int, units: int, grid: int, n: int) -> int:
    """The "staggersplitw" kernel: the interior K/V steps (hook calls: a unit of b blocks has b - 1) after unit u until its CTA
    next stages a tile: the next unit u + grid if it is whole (n blocks) or an owner (the second half), through it
    and the unit after if it is a partner (the first half, ceil(n / 2) blocks); 0 if u is the CTA's last unit (the
    kernel's ``window``, same arithmetic: at most two split units per CTA, as split < grid)."""
    n_p = (n + 1) // 2
    u1 = u + grid
    if u1 >= units:
        return 0
    if u1 < whole:
        return n - 1
    k1 = u1 - whole
    if k1 % 2:
        return n - n_p - 1
    after = 0 if u1 + grid >= units else (n - n_p - 1 if (k1 + grid) % 2 else n_p - 1)
    return n_p - 1 + after


def split_tiles(blocks: int, heads: int, batch: int, rank: int, world: int, sms: int) -> list:
    """(m_block, head, batch) of the tiles the split schedule merges from two halves (the rest are whole tiles,
    computed exactly as stock FA4 computes them)."""
    whole, split, _, _ = split_plan(blocks * heads * batch, sms)
    return [local_last_tile(whole + i, blocks, heads, batch, rank, world) for i in range(split)]


def split_workspace_bytes(sms: int) -> int:
    """The pair slots (at most sms - 1 pairs) and the timeout counter (the last int32)."""
    return (sms * SPLIT_WORDS * SPLIT_THREADS + 1) * 4


def kernel_class(kernel: str = "drain"):
    """The subclass of FA4's ``FlashAttentionForwardSm90`` (imports the CuTe DSL on first use)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel {kernel!r} is not one of {KERNELS}")
    if kernel in SPLIT_KERNELS:
        from xstage.hw.attention.fa4_split_kernel import KERNELS as split_classes

        return split_classes[kernel]
    from xstage.hw.attention.fa4_persistent_kernel import KERNELS as classes

    return classes[kernel]


_CACHE = {}


@contextlib.contextmanager
def installed(scheduler: str = "static", kernel: str = "drain", rank: int = 0, world: int = 8, tile_log=None):
    """FA4's interface builds ``kernel_class(kernel)`` with ``scheduler`` (``SCHEDULERS``; rank and world only
    for "local_last"), from our own compile cache; ``tile_log`` (address, slots): the class with the tile log
    (``fa4_tile_log_kernel``), its address compiled in (an in-process cache)."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler {scheduler!r} is not one of {SCHEDULERS}")
    if (scheduler == "local_last_split") != (kernel in SPLIT_KERNELS):
        raise ValueError(f"kernel {kernel!r} with scheduler {scheduler!r}: the split last wave needs a kernel of "
                         f"{SPLIT_KERNELS} and scheduler 'local_last_split' together (one merges what the other splits)")
    cls = kernel_class(kernel)
    if tile_log is not None:
        from xstage.hw.attention.fa4_tile_log_kernel import logged_class

        cls = logged_class(cls, *tile_log)
    import flash_attn.cute.flash_fwd_sm90 as m90
    import flash_attn.cute.interface as fi
    from flash_attn.cute.cache_utils import get_jit_cache

    if scheduler == "local_last":
        from xstage.hw.attention.fa4_schedulers import local_last_scheduler

        sched, tag = local_last_scheduler(rank, world), f"{scheduler}-r{rank}w{world}"
    elif scheduler == "dynamic":
        from xstage.hw.attention.fa4_schedulers import dynamic_scheduler

        addr = _counter().data_ptr()
        sched, tag = dynamic_scheduler(addr), f"{scheduler}-{addr:x}"
    elif scheduler == "local_last_dynamic":
        from xstage.hw.attention.fa4_schedulers import local_last_dynamic_scheduler

        addr = _counter().data_ptr()
        sched, tag = local_last_dynamic_scheduler(addr, rank, world), f"{scheduler}-{addr:x}-r{rank}w{world}"
    elif scheduler == "local_last_split":
        from xstage.hw.attention.fa4_schedulers import split_scheduler

        addr = _workspace().data_ptr()
        sched, tag = split_scheduler(addr, rank, world), f"{scheduler}-{addr:x}-r{rank}w{world}"
    elif scheduler == "single":
        sched, tag = m90.SingleTileScheduler, scheduler
    else:
        from flash_attn.cute.tile_scheduler import StaticPersistentTileScheduler as sched
        tag = scheduler
    # the dynamic kernel has its counter's address compiled in: an in-process cache only, never a disk one
    cache = _CACHE.setdefault((tag, kernel, tile_log), {} if "dynamic" in scheduler or "split" in scheduler
                              or tile_log is not None else get_jit_cache(f"fwd-xstage-persistent-{tag}-{kernel}"))
    saved = fi.FlashAttentionForwardSm90, m90.SingleTileScheduler, fi._flash_attn_fwd.compile_cache
    fi.FlashAttentionForwardSm90, m90.SingleTileScheduler = cls, sched
    fi._flash_attn_fwd.compile_cache = cache
    try:
        yield cls
    finally:
        fi.FlashAttentionForwardSm90, m90.SingleTileScheduler, fi._flash_attn_fwd.compile_cache = saved


_COUNTERS = {}


def _counter():
    """The dynamic scheduler's zeroed int32 tile counter on the current device (kept for the process: each
    launch's last fetch resets it)."""
    import torch

    dev = torch.cuda.current_device()
    if dev not in _COUNTERS:
        _COUNTERS[dev] = torch.zeros(1, dtype=torch.int32, device=f"cuda:{dev}")
    return _COUNTERS[dev]


_WORKSPACES = {}


def _workspace():
    """The split kernel's zeroed workspace on the current device (pair slots + flags + timeout counter; kept for the
    process: each owner resets its flags after reading, so every launch starts from zero flags)."""
    import torch

    dev = torch.cuda.current_device()
    if dev not in _WORKSPACES:
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        _WORKSPACES[dev] = torch.zeros(split_workspace_bytes(sms) // 4, dtype=torch.int32, device=f"cuda:{dev}")
    return _WORKSPACES[dev]


def split_timeouts() -> int:
    """How many owner threads on the current device gave up waiting for their partner (each wrote NaN instead of
    its merged fragment) since the workspace was made; 0 when the split kernel never ran."""
    import torch

    dev = torch.cuda.current_device()
    return int(_WORKSPACES[dev][-1].item()) if dev in _WORKSPACES else 0


def forward_impl(fwd, scheduler: str = "static", kernel: str = "drain", rank: int = 0, world: int = 8,
                 tile_log=None):
    """``fwd`` (``_flash_attn_fwd``'s signature) run with ``kernel_class(kernel)`` installed (``kernel`` may be
    a ``PLANS`` name: its scheduler wins); refuses an LSE output (our epilogue writes none), and for the
    local-last order an M that is not whole 128-row m-blocks per rank chunk. ``tile_log``: an int64 CUDA tensor
    (sms, slots, fields) the logged kernel stamps (``fa4_tile_log``; the caller zeroes it between runs)."""
    kernel, scheduler = resolve(kernel, scheduler)
    if "local_last" in scheduler and not (world >= 2 and 0 <= rank < world):
        raise ValueError(f"local_last: rank {rank} / world {world} (needs world >= 2, 0 <= rank < world)")

    def run(q, k, v, **kw):
        if kw.get("return_lse") or kw.get("lse") is not None:
            raise ValueError("PersistentSm90 writes no LSE (return_lse / lse are not supported)")
        if "local_last" in scheduler and q.shape[1] % (128 * world):
            raise ValueError(f"local_last: M {q.shape[1]} is not a multiple of 128 x world ({128 * world})")
        if "split" in scheduler and (q.shape[-1] != 128 or v.shape[-1] != 128):
            raise ValueError(f"local_last_split: head dim {q.shape[-1]}/{v.shape[-1]} (its pair slots hold d = 128)")
        if "dynamic" in scheduler and -(-q.shape[1] // 128) * q.shape[0] * q.shape[2] > MAX_TILES:
            raise ValueError(f"dynamic: more than {MAX_TILES} tiles (shape {tuple(q.shape)})")
        log = None
        if tile_log is not None:
            import torch

            from xstage.hw.attention.fa4_tile_log import check_tile_log

            log = check_tile_log(tile_log, torch.cuda.get_device_properties(q.device).multi_processor_count)
        with installed(scheduler, kernel, rank, world, log):
            return fwd(q, k, v, **kw)
    return run
