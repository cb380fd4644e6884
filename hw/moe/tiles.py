"""The tile pieces both fused MoE kernels are built from (``kernel.py``: bf16, ``w8a8.py``: W8A8).

A program walks its slice of the schedule's tile array (``_program_span``, ``_tile_fields``: columns
kind, expert, n_block, row, need of ``Schedule.to_arrays()``); a Linear-2 tile first waits for every
Linear-1 tile of its row (``_tile_wait``: acquire spin, bounded by ``spin_limit``, sets the error flag
and skips the tile on timeout); a Linear-1 tile ends by releasing its row (``_release_row``); a Linear-2
tile's epilogue finds each row's destination (``_combine_rows``, ``_combine_dst``), stores, and with
COUNT_WRITES counts its stores per (row, N tile) (``_count_writes``). With INSTRUMENT every tile logs one
row of ``buffers.TILE_LOG_FIELDS`` (``_stamp``, ``_log_tile``: %globaltimer ns, GPU only).

The TMA mainloop (``_mainloop_tma``: A and W tiles through tensor descriptors, fp32 accumulator) serves
both precisions' Linear-1 and the bf16 Linear-2; ``_act_fence`` orders a Linear-2 tile's TMA reads of the
activations (async proxy) after the acquire that saw them written (generic proxy, other SMs). The
arithmetic between the mainloops differs per precision and stays in the kernels. Importing this module
imports triton: callers import the kernels inside functions.
"""

import triton
import triton.language as tl

from xstage.hw.common.ptx import _globaltimer, _smid


@triton.jit
def _stamp(INSTRUMENT: tl.constexpr):
    """%globaltimer (ns) when instrumented, else 0."""
    t = tl.full([], 0, tl.int64)
    if INSTRUMENT:
        t = _globaltimer()
    return t


@triton.jit
def _program_span(offsets_ptr):
    """(program id, first tile, one past its last tile) of this program's slice of the schedule."""
    pid = tl.program_id(0)
    return pid, tl.load(offsets_ptr + pid), tl.load(offsets_ptr + pid + 1)


@triton.jit
def _placed_span(offsets_ptr, place_ptr, slots_ptr, n_sm, error_ptr, PLACE: tl.constexpr):
    """(schedule program, first tile, one past its last tile) of this CTA. PLACE = 0: the program id. PLACE = P > 0
    (P programs per SM, all resident): the CTA takes the next slot of its SM (``slots[smid]`` += 1) and runs
    program ``place[smid * P + slot]`` (``placement.balanced_placement``: a heavy and a light program per SM).
    An SM id or slot outside the map sets the error flag and runs nothing (the others' waits then time out)."""
    pid = tl.program_id(0)
    if PLACE > 0:
        sm = _smid()
        inside = sm < n_sm
        slot = tl.atomic_add(slots_ptr + tl.where(inside, sm, 0), 1, mask=inside)
        ok = inside & (slot < PLACE)
        key = tl.where(ok, sm * PLACE + slot, 0)
        pid = tl.load(place_ptr + key)
        if not ok:
            tl.store(error_ptr, 1)
    t_first = tl.load(offsets_ptr + pid)
    t_last = tl.load(offsets_ptr + pid + 1)
    if PLACE > 0:
        if not ok:
            t_last = t_first
    return pid, t_first, t_last


@triton.jit
def _tile_raw(tiles_ptr, i, valid):
    """(kind, expert, n_block, row, need) of tile ``i`` (int32; zeros where not ``valid``)."""
    tile = tiles_ptr + i * 8
    return (tl.load(tile + 0, mask=valid, other=0), tl.load(tile + 1, mask=valid, other=0),
            tl.load(tile + 3, mask=valid, other=0), tl.load(tile + 6, mask=valid, other=0),
            tl.load(tile + 7, mask=valid, other=0))


@triton.jit
def _tile_fields(tiles_ptr, i, BLOCK_M: tl.constexpr):
    """(kind, expert (int32 and int64), n_block, row, need, offs_m) of tile ``i``: columns 0, 1, 3, 6, 7 of
    the schedule's [T, 8] tile array, and the BLOCK_M token rows of its row block."""
    tile = tiles_ptr + i * 8
    kind = tl.load(tile + 0)
    expert32 = tl.load(tile + 1)
    n_block = tl.load(tile + 3)
    row = tl.load(tile + 6)
    need = tl.load(tile + 7)
    offs_m = row.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    return kind, expert32, expert32.to(tl.int64), n_block, row, need, offs_m


@triton.jit
def _wait_l2_full(l2_full_ptr, row, need, spin_limit, error_ptr):
    """Spin (acquire) until ``need`` Linear-1 tiles of ``row`` are done, at most ``spin_limit`` polls.

    Returns 1 when the row is ready; on timeout sets the error flag and returns 0 (the tile is skipped,
    never a hang).
    """
    run = 1
    seen = tl.atomic_add(l2_full_ptr + row, 0, sem="acquire")
    spins = 0
    while (seen < need) & (spins < spin_limit):
        seen = tl.atomic_add(l2_full_ptr + row, 0, sem="acquire")
        spins += 1
    if seen < need:
        tl.store(error_ptr, 1)
        run = 0
    tl.debug_barrier()
    return run


@triton.jit
def _tile_wait(kind, l2_full_ptr, row, need, spin_limit, error_ptr, INSTRUMENT: tl.constexpr):
    """(run, wait start, mainloop start): run is 1 for a Linear-1 tile; a Linear-2 tile waits for every
    Linear-1 tile of its row (bounded spin, acquire) and gets 0 when the wait timed out."""
    t_wait = _stamp(INSTRUMENT)
    run = 1
    if kind == 1:
        run = _wait_l2_full(l2_full_ptr, row, need, spin_limit, error_ptr)
    return run, t_wait, _stamp(INSTRUMENT)


@triton.jit
def _mainloop_tma(a_desc, w_desc, a_row, w_row, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, DOT_F32: tl.constexpr, WS: tl.constexpr):
    """``acc[BM, BN] = A[a_row:+BM, :K] W[w_row:+BN, :K]^T`` (fp32), both through tensor descriptors;
    WS: warp-specialized loop (producer warps issue the loads)."""
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, warp_specialize=WS):
        a = a_desc.load([a_row, k])
        w = tl.trans(w_desc.load([w_row, k]))
        if DOT_F32:  # the interpreter multiplies bf16 / fp8 as raw integers: upcast there
            a, w = a.to(tl.float32), w.to(tl.float32)
        acc = tl.dot(a, w, acc)
    return acc


@triton.jit
def _act_fence(ACT_TMA: tl.constexpr, DOT_F32: tl.constexpr):
    """``fence.proxy.async.global`` before TMA reads of activations other SMs wrote (GPU only)."""
    if ACT_TMA and not DOT_F32:
        tl.inline_asm_elementwise("fence.proxy.async.global; mov.u32 $0, 0;", "=r", [], dtype=tl.int32,
                                  is_pure=False, pack=1)


@triton.jit
def _no_stamps():
    """Mainloop end, issue start and issue end before they are taken (0: a skipped or uninstrumented tile)."""
    return tl.full([], 0, tl.int64), tl.full([], 0, tl.int64), tl.full([], 0, tl.int64)


@triton.jit
def _release_row(l2_full_ptr, row):
    """A Linear-1 tile is done: every thread's act stores precede the release of ``l2_full[row] += 1``."""
    tl.debug_barrier()
    tl.atomic_add(l2_full_ptr + row, 1, sem="release")


@triton.jit
def _combine_rows(dest_rank_ptr, dest_row_ptr, weight_ptr, dest_table_ptr, offs_m, out_ty: tl.constexpr):
    """(dest_rank, dest_row, router weight, valid, destination base) of the token rows ``offs_m``;
    padding rows (dest_rank < 0) are not valid and read the table's first entry."""
    d_rank = tl.load(dest_rank_ptr + offs_m)
    d_row = tl.load(dest_row_ptr + offs_m).to(tl.int64)
    wt = tl.load(weight_ptr + offs_m)
    valid = d_rank >= 0
    base = tl.load(dest_table_ptr + tl.where(valid, d_rank, 0)).to(tl.pointer_type(out_ty))
    return d_rank, d_row, wt, valid, base


@triton.jit
def _combine_dst(base, d_row, cols, hidden, BLOCK_N: tl.constexpr):
    """Pointers of a [BLOCK_M, BLOCK_N] Combine tile: row ``d_row`` of each row's destination buffer."""
    dst = base[:, None] + d_row[:, None] * hidden + cols[None, :]
    # destination buffers are 16-byte aligned and hidden % 8 == 0: let the stores vectorize
    return tl.max_contiguous(tl.multiple_of(dst, [1, 16]), [1, BLOCK_N])


@triton.jit
def _count_writes(count_ptr, valid, d_rank, d_row, n_block, combine_rows, l2_tiles, BLOCK_M: tl.constexpr):
    """``count[d_rank, d_row, n_block] += 1`` for every valid row (the tests' written-once check)."""
    slot = (tl.where(valid, d_rank, 0).to(tl.int64) * combine_rows + d_row) * l2_tiles + n_block
    tl.atomic_add(count_ptr + slot, tl.full([BLOCK_M], 1, tl.int32), mask=valid)


@triton.jit
def _log_tile(log_ptr, i, pid, t_first, t_wait, t_ml0, t_ml1, t_is0, t_is1):
    """Row ``i`` of the tile log: ``buffers.TILE_LOG_FIELDS``."""
    log = log_ptr + i * 8
    tl.store(log + 0, pid.to(tl.int64))
    tl.store(log + 1, _smid().to(tl.int64))
    tl.store(log + 2, (i - t_first).to(tl.int64))
    tl.store(log + 3, t_wait)
    tl.store(log + 4, t_ml0)
    tl.store(log + 5, t_ml1)
    tl.store(log + 6, t_is0)
    tl.store(log + 7, t_is1)
