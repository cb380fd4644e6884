"""FlashAttention forward fused with the Ulysses post-attention All-to-All (paper §4.3, §5.3).

One sender rank holds the whole sequence (M tokens) of its H local heads, ``q, k, v: (M, H, d)``
bf16, and must deliver its attention output in the sequence-partitioned layout of
``xstage.sim.workloads.a2a_layout``: rows ``[j*M/W, (j+1)*M/W)`` of local head ``h`` go to rank ``j``'s buffer
``(M/W, W*H, d)`` at head column ``rank*H + h``. Variants:

- FA-only: persistent FlashAttention (non-causal, bf16, d in {64, 128}) into a local ``(M, H, d)``.
- Serial: FA-only, then ``launch_a2a`` (a separate kernel storing the same tiles to the destinations).
- X-Stage-Fused: the program that finishes an output tile stores it straight into its destination
  rank's buffer (``FUSED``) and moves on to its next tile; no communication warp or SM.
- Serial-best: torch SDPA (cuDNN) then copy-engine 2-D copies into the destinations (``ce_transfer``).

Destinations are a device table of W base pointers (``Destinations``): on one GPU the self chunk is
in device memory and the W-1 others are host-mapped pinned buffers (``xstage.hw.common.hostmap``); on W
GPUs they are symmetric-memory peer buffers (``xstage.hw.attention.dist``). The kernel does not
know the difference.

Per-tile instrumentation (``tile_log``, off by default): %globaltimer at Q-loop start and end and
at issue start and end, plus %smid, one row of 8 int64 per tile (see ``TILE_LOG_FIELDS``). With
``tile_clocks`` the ``program`` field also carries the Q-loop's %clock64 cycles (``program | cycles << 16``;
``xstage.records.attention.decode_clock_field``), from which the SM clock over each Q-loop follows. The
Triton interpreter cannot run inline asm, so instrumentation needs a GPU.

Run on CPU: ``TRITON_INTERPRET=1 pytest tests/hw/test_attention_kernels.py``; on a GPU:
``bash benchmarks/gpu/attention.sh``. The tile pieces: ``tiles.py``; records: ``xstage.records.attention``.
This module imports triton: callers import it inside functions.
"""

import math

import triton
import triton.language as tl

from xstage.errors import InputError
from xstage.hw.common.ptx import _clock64, _globaltimer, _smid
from xstage.hw.attention.config import SUPPORTED_HEAD_DIMS, AttentionConfig  # noqa: F401 - re-exported
from xstage.hw.attention.refs import Destinations, ce_transfer, compare, reference_attention, sdpa  # noqa: F401 - re-exported
from xstage.hw.attention.tiles import _local_last, _merge_store, _q_loop, _send_tile, _store_tile

LOG2E = 1.4426950408889634
TILE_LOG_FIELDS = ("program", "sm", "seq", "loop_start_ns", "loop_end_ns", "issue_start_ns", "issue_end_ns",
                   "split")


@triton.jit
def _fa_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, dest_table_ptr, tile_log_ptr, stage_ptr, ws_ptr, count_ptr,
                   stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_om, stride_oh,
                   stride_dm, stride_dh,
                   seq_len, chunk_rows, head_base, self_rank, qk_scale, num_tiles, m_blocks, n_full,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   FUSED: tl.constexpr, INSTRUMENT: tl.constexpr, DOT_F32: tl.constexpr, TMA: tl.constexpr,
                   STORE_CACHE: tl.constexpr, LOCAL_LAST: tl.constexpr, DRIP: tl.constexpr,
                   STAGGER: tl.constexpr, CHUNK_ROWS: tl.constexpr, PARTS: tl.constexpr,
                   CLOCKS: tl.constexpr = False):
    """Persistent FA forward: program ``pid`` owns work items pid, pid + P, ...

    Work items: the first ``n_full`` tiles of the order (tile = head * m_blocks + m_block, or with
    LOCAL_LAST the order of ``_local_last``) are whole tiles; each later tile (the last, partial wave,
    when PARTS > 1) is PARTS items, one per part of the K/V range, on consecutive programs. Every part
    saves its partial (acc, m, l) in ``ws_ptr``; the last to arrive (an acq_rel counter, no waiting)
    merges them from memory (``_merge_store``) and owns the tile's epilogue. The last wave then ends
    as early as the parts balance (``AttentionConfig.tail_split``), its tiles finish a few at a time,
    and with LOCAL_LAST the final ones are mostly the sender's own, whose stores stay local.

    TMA: q/k/v are host tensor descriptors over the (M, H*d) views (blocks (BLOCK_*, d)) instead of pointers.
    STORE_CACHE: PTX cache operator of the fused epilogue's stores (".wt" writes system memory through L2).
    DRIP / STAGGER (fused only): a finished tile goes to this program's staging slot in local memory
    and its remote stores are issued during the program's next Q-loop (``_q_loop``: in CHUNK_ROWS
    chunks spread over the loop, or whole at a program-dependent step); a staged tile still pending
    when the program finishes its next tile is sent before that one is staged; the last one at the end.
    """
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs_d = tl.arange(0, HEAD_DIM)
    rows_m = tl.arange(0, BLOCK_M)
    out_ty = o_ptr.dtype.element_ty
    stage = stage_ptr + pid * (BLOCK_M * HEAD_DIM)
    N_CHUNKS: tl.constexpr = BLOCK_M // CHUNK_ROWS
    SEND_SLOTS: tl.constexpr = 16  # STAGGER: programs p, p + 16, ... send at the same point of their Q-loop
    n_steps = seq_len // BLOCK_N
    send_due = (pid % SEND_SLOTS) * n_steps // (2 * SEND_SLOTS)  # STAGGER: K/V steps from staging to sending
    pend_ptr = o_ptr  # destination of the staged tile (DRIP, STAGGER)
    pend_chunks = pid * 0
    pend_wait = pid * 0  # K/V steps run since it was staged
    pend_tile = pid * 0  # its tile number (the tile log row that its send fills)
    n_items = n_full + PARTS * (num_tiles - n_full)
    for item in range(pid, n_items, nprog):
        split = item >= n_full
        pos = tl.where(split, n_full + (item - n_full) // PARTS, item)
        kv_part = tl.where(split, (item - n_full) % PARTS, 0)
        if LOCAL_LAST:
            head, m_block = _local_last(pos, m_blocks, chunk_rows // BLOCK_M, self_rank, num_tiles // m_blocks)
        else:
            head = pos // m_blocks
            m_block = pos % m_blocks
        tile = head * m_blocks + m_block
        kv_start = tl.where(split, (kv_part * n_steps // PARTS) * BLOCK_N, 0)
        kv_end = tl.where(split, ((kv_part + 1) * n_steps // PARTS) * BLOCK_N, seq_len)
        if INSTRUMENT:
            t_loop0 = _globaltimer()
            if CLOCKS:
                c_loop0 = _clock64()
        if TMA:
            q = q_ptr.load([m_block * BLOCK_M, head * HEAD_DIM])
        else:
            q = tl.load(q_ptr + head * stride_qh + (m_block * BLOCK_M + rows_m)[:, None] * stride_qm + offs_d[None, :])
        acc, m_i, l_i, pend_chunks, pend_wait = _q_loop(
            q, k_ptr, v_ptr, head, kv_start, kv_end, stride_km, stride_kh, stride_vm, stride_vh, qk_scale, stage,
            pend_ptr, pend_chunks, pend_wait, stride_dm, send_due, tile_log_ptr + pend_tile * 8, HEAD_DIM, BLOCK_M,
            BLOCK_N, DOT_F32, TMA, STORE_CACHE, DRIP, STAGGER, CHUNK_ROWS, INSTRUMENT)
        if INSTRUMENT:
            t_loop1 = _globaltimer()
            if CLOCKS:
                c_loop1 = _clock64()
        if FUSED:  # the tile's rows all go to one rank (block_m divides M/W)
            row0 = m_block * BLOCK_M
            dest = row0 // chunk_rows
            base = tl.multiple_of(tl.load(dest_table_ptr + dest).to(tl.pointer_type(out_ty)), 16)  # 16 B stores
            dest_tile = base + (head_base + head) * stride_dh + (row0 - dest * chunk_rows) * stride_dm
            if DRIP or STAGGER:  # the finished tile goes to the staging slot, sent during the next Q-loop
                target = stage
                target_stride = HEAD_DIM
            else:
                target = dest_tile
                target_stride = stride_dm
        else:
            target = o_ptr + head * stride_oh + m_block * BLOCK_M * stride_om
            target_stride = stride_om
        if INSTRUMENT:
            t_issue0 = _globaltimer()
        owner = pid * 0 + 1
        # Split and whole tiles in separate branches: in the split one the accumulator is dead once saved,
        # so a pending send and the merge do not hold registers beside it.
        if PARTS > 1:
            if split:
                part = ws_ptr + (pos - n_full) * PARTS * (BLOCK_M * (HEAD_DIM + 2))  # the parts' partials
                mine = part + kv_part * (BLOCK_M * (HEAD_DIM + 2))
                tl.store(mine + rows_m[:, None] * HEAD_DIM + offs_d[None, :], acc)
                tl.store(mine + BLOCK_M * HEAD_DIM + rows_m, m_i)
                tl.store(mine + BLOCK_M * (HEAD_DIM + 1) + rows_m, l_i)
                tl.debug_barrier()  # the whole partial is written before the release below
                arrived = tl.atomic_add(count_ptr + pos - n_full, 1, sem="acq_rel")
                tl.debug_barrier()
                owner = (arrived == PARTS - 1).to(tl.int32)  # the last part merges the partials, owns the epilogue
                if owner != 0:
                    if STAGGER:
                        if pend_chunks > 0:  # the previous tile was not due yet: it goes before this one is staged
                            _send_tile(stage, pend_ptr, stride_dm, tile_log_ptr + pend_tile * 8, BLOCK_M, HEAD_DIM,
                                       STORE_CACHE, INSTRUMENT)
                    if DRIP or STAGGER:
                        tl.debug_barrier()  # every thread is done reading the previous tile from the slot
                    _merge_store(part, target, target_stride, BLOCK_M, HEAD_DIM, CHUNK_ROWS, PARTS,
                                 STORE_CACHE if FUSED and not (DRIP or STAGGER) else "")
                    tl.atomic_xchg(count_ptr + pos - n_full, 0)  # ready for the next launch
            else:
                _store_tile(acc, l_i, target, target_stride, BLOCK_M, HEAD_DIM, DRIP or STAGGER,
                            STORE_CACHE if FUSED and not (DRIP or STAGGER) else "")
        else:
            _store_tile(acc, l_i, target, target_stride, BLOCK_M, HEAD_DIM, DRIP or STAGGER,
                        STORE_CACHE if FUSED and not (DRIP or STAGGER) else "")
        if owner != 0:
            if FUSED:
                if DRIP or STAGGER:
                    tl.debug_barrier()  # the slot is visible to every thread of the program
                    pend_ptr = dest_tile
                    pend_chunks = pid * 0 + N_CHUNKS
                    pend_wait = pid * 0
                    pend_tile = tile
            if INSTRUMENT:
                t_issue1 = _globaltimer()
                log = tile_log_ptr + tile * 8
                if CLOCKS:
                    tl.store(log + 0, pid.to(tl.int64) | ((c_loop1 - c_loop0) << 16))
                else:
                    tl.store(log + 0, pid.to(tl.int64))
                tl.store(log + 1, _smid().to(tl.int64))
                tl.store(log + 2, ((item - pid) // nprog).to(tl.int64))
                tl.store(log + 3, t_loop0)
                tl.store(log + 4, t_loop1)
                if not STAGGER:  # STAGGER: the send in the next Q-loop (or at the end) writes these
                    tl.store(log + 5, t_issue0)
                    tl.store(log + 6, t_issue1)
                tl.store(log + 7, split.to(tl.int64))
    if DRIP or STAGGER:  # the last staged tile has no Q-loop after it: send it whole
        if pend_chunks > 0:
            _send_tile(stage, pend_ptr, stride_dm, tile_log_ptr + pend_tile * 8, BLOCK_M, HEAD_DIM, STORE_CACHE,
                       INSTRUMENT and STAGGER)


@triton.jit
def _a2a_store_kernel(o_ptr, dest_table_ptr, stride_om, stride_oh, stride_dm, stride_dh,
                      chunk_rows, head_base, m_blocks,
                      HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, STORE_CACHE: tl.constexpr):
    """Serial's separate All-to-All step: program = one output tile, same stores as the fused epilogue."""
    tile = tl.program_id(0)
    head = tile // m_blocks
    m_block = tile % m_blocks
    offs_d = tl.arange(0, HEAD_DIM)
    row0 = m_block * BLOCK_M
    offs_m = row0 + tl.arange(0, BLOCK_M)
    out = tl.load(o_ptr + head * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :])
    dest = row0 // chunk_rows
    base = tl.multiple_of(tl.load(dest_table_ptr + dest).to(tl.pointer_type(o_ptr.dtype.element_ty)), 16)
    rows = row0 - dest * chunk_rows + tl.arange(0, BLOCK_M)
    tl.store(base + (head_base + head) * stride_dh + rows[:, None] * stride_dm + offs_d[None, :], out,
             cache_modifier=STORE_CACHE)


def _check_qkv(q, k, v, cfg: AttentionConfig) -> None:
    import torch

    shape = (cfg.seq_len, cfg.heads, cfg.head_dim)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if tuple(t.shape) != shape:
            raise InputError(f"{name}.shape", tuple(t.shape), f"must be (M, H, d) = {shape}")
        if t.dtype != torch.bfloat16:
            raise InputError(f"{name}.dtype", t.dtype, "must be torch.bfloat16")
        if t.stride(2) != 1:
            raise InputError(f"{name}.stride", t.stride(), "must have a contiguous head dimension")
        if t.device != q.device:
            raise InputError(f"{name}.device", t.device, f"must equal q.device={q.device}")


def interpreting() -> bool:
    """True when this module's kernels run in the Triton interpreter (TRITON_INTERPRET=1 at import)."""
    return type(_fa_fwd_kernel).__name__ == "InterpretedFunction"


def num_programs(cfg: AttentionConfig, device) -> int:
    tiles = cfg.layout.num_tiles
    if cfg.programs:
        return min(cfg.programs, tiles)
    if getattr(device, "type", str(device)) == "cuda":
        import torch
        return min(tiles, torch.cuda.get_device_properties(device).multi_processor_count)
    return min(tiles, 4)


def launch_fa(q, k, v, cfg: AttentionConfig, *, out=None, dest_table=None, tile_log=None, tile_clocks=False):
    """FA-only (``out`` given) or X-Stage-Fused (``dest_table`` given): launch the persistent kernel.

    ``dest_table``: int64 tensor of W destination base addresses, each buffer (M/W, W*H, d)
    contiguous. ``tile_log``: int64 (tiles, 8) tensor to record per-tile timestamps (GPU only);
    ``tile_clocks``: its ``program`` field also carries the Q-loop's SM cycles
    (``xstage.records.attention.decode_clock_field``).
    """
    _check_qkv(q, k, v, cfg)
    lay = cfg.layout
    fused = dest_table is not None
    if fused == (out is not None):
        raise InputError("out/dest_table", (out is not None, fused), "exactly one of them must be given")
    if fused and tuple(dest_table.shape) != (cfg.world_size,):
        raise InputError("dest_table.shape", tuple(dest_table.shape), f"must be ({cfg.world_size},)")
    if not fused and (tuple(out.shape) != tuple(q.shape) or out.stride(2) != 1 or out.dtype != q.dtype):
        raise InputError("out", (tuple(out.shape), out.dtype), f"must be a {tuple(q.shape)} bf16 tensor")
    if tile_log is not None and tuple(tile_log.shape) != (lay.num_tiles, len(TILE_LOG_FIELDS)):
        raise InputError("tile_log.shape", tuple(tile_log.shape), f"must be ({lay.num_tiles}, 8)")
    o = q if out is None else out  # placeholder pointer when fused
    table = dest_table if fused else q
    log = tile_log if tile_log is not None else q
    _, heads_total, d = lay.dest_shape
    grid = (num_programs(cfg, q.device),)
    qa, ka, va = (_descriptor(t, cfg, block) for t, block in ((q, cfg.block_m), (k, cfg.block_n), (v, cfg.block_n))) \
        if cfg.tma else (q, k, v)
    drip, stagger = fused and cfg.drip, fused and cfg.stagger
    chunk_rows = min(cfg.block_m, 2048 // cfg.head_dim)
    stage = _stage_slots(grid[0], cfg, q.device) if drip or stagger else q
    n_full, parts = cfg.tail_split(grid[0])
    ws, counts = _split_workspace(max(lay.num_tiles - n_full, 1), parts, cfg, q.device)  # typed even when unused
    compiled = _fa_fwd_kernel[grid](
        qa, ka, va, o, table, log, stage, ws, counts,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), o.stride(0), o.stride(1),
        heads_total * d, d,
        cfg.seq_len, lay.chunk_rows, cfg.rank * cfg.heads, cfg.rank, LOG2E / math.sqrt(cfg.head_dim), lay.num_tiles,
        lay.m_blocks, n_full,
        HEAD_DIM=cfg.head_dim, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, FUSED=fused,
        INSTRUMENT=tile_log is not None, DOT_F32=interpreting(), TMA=cfg.tma, STORE_CACHE=cfg.store_cache,
        LOCAL_LAST=cfg.local_last, DRIP=drip, STAGGER=stagger, CHUNK_ROWS=chunk_rows, PARTS=parts,
        CLOCKS=bool(tile_clocks and tile_log is not None),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if hasattr(compiled, "n_regs"):  # the compiled kernel (not in the interpreter)
        build = "plain" if tile_log is None else "clocks" if tile_clocks else "tile_log"
        COMPILE_STATS[(cfg.label(), fused, build)] = {"n_regs": compiled.n_regs, "n_spills": compiled.n_spills}
    return out


# (config label, fused, build) -> registers and spills of the compiled FA kernel. ``build`` is "plain",
# "tile_log" or "clocks": an instrumented launch compiles to another kernel, so it has its own entry.
COMPILE_STATS = {}


def compile_stats(cfg: AttentionConfig, fused: bool, build: str = "plain") -> dict:
    """{"n_regs", "n_spills"} of the last compiled launch of that kernel build (None each before one)."""
    s = COMPILE_STATS.get((cfg.label(), fused, build), {})
    return {"n_regs": s.get("n_regs"), "n_spills": s.get("n_spills")}


_STAGES = {}


def _stage_slots(programs: int, cfg: AttentionConfig, device):
    """One (block_m, d) bf16 staging slot per program for DRIP (kept, so graph replays reuse it)."""
    import torch

    key = (programs, cfg.block_m, cfg.head_dim, str(device))
    if key not in _STAGES:
        _STAGES[key] = torch.empty(programs * cfg.block_m * cfg.head_dim, dtype=torch.bfloat16, device=device)
    return _STAGES[key]


def _split_workspace(n_split: int, parts: int, cfg: AttentionConfig, device):
    """Partials (acc, m, l: fp32) of the ``parts`` K/V parts of each split tile and one arrival counter
    per tile. Kept per shape, so CUDA-graph replays reuse them; the kernel resets each counter after merging.
    """
    import torch

    key = ("split", n_split, parts, cfg.block_m, cfg.head_dim, str(device))
    if key not in _STAGES:
        _STAGES[key] = (torch.empty(n_split * max(parts, 2) * cfg.block_m * (cfg.head_dim + 2), dtype=torch.float32, device=device),
                        torch.zeros(n_split, dtype=torch.int32, device=device))
    return _STAGES[key]


def _descriptor(t, cfg: AttentionConfig, block_rows: int):
    """Host TMA descriptor over the (M, H*d) view of ``t`` (M, H, d), blocks of (block_rows, d)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    if t.stride(1) != cfg.head_dim:
        raise InputError("tensor stride", t.stride(), "must have adjacent heads (stride(1) == d) for tma=True")
    return TensorDescriptor(t, [cfg.seq_len, cfg.heads * cfg.head_dim], [t.stride(0), 1],
                            [block_rows, cfg.head_dim])


def launch_a2a(o, dest_table, cfg: AttentionConfig, num_warps: int = 4) -> None:
    """Serial's All-to-All: store the tiles of ``o`` (M, H, d) into the destination buffers."""
    lay = cfg.layout
    if tuple(o.shape) != (cfg.seq_len, cfg.heads, cfg.head_dim) or o.stride(2) != 1:
        raise InputError("o.shape", tuple(o.shape), f"must be {(cfg.seq_len, cfg.heads, cfg.head_dim)}")
    _, heads_total, d = lay.dest_shape
    _a2a_store_kernel[(lay.num_tiles,)](o, dest_table, o.stride(0), o.stride(1), heads_total * d, d,
                                        lay.chunk_rows, cfg.rank * cfg.heads, lay.m_blocks,
                                        HEAD_DIM=cfg.head_dim, BLOCK_M=cfg.block_m, STORE_CACHE=cfg.store_cache,
                                        num_warps=num_warps)
