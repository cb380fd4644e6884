"""The fused bf16 MoE FFN as a warp-specialised Gluon kernel (issue 17): a TMA loader warp runs ahead of the MMA.

Same work and order as ``kernel.py``'s ``_moe_ffn_kernel`` (one CTA per schedule program, walking
``tiles[sm_offsets[s]:sm_offsets[s+1]]`` of ``Schedule.to_arrays()``: expert-wave or interleaved), but split
into two partitions of one CTA (``gl.warp_specialize``) that hand shared-memory stages to each other through
mbarriers:

- the **loader** (one warp, worker partition): walks the program's tiles and, for each K chunk, waits for a
  free stage, then issues the TMA loads of the A tile (x for Linear-1, the activations for Linear-2) and the
  weight tile into it. Before a Linear-2 tile's loads it waits (acquire polls of ``l2_full[row]``, at most
  ``spin_limit``; on timeout it sets ``error[0] = 1`` and loads anyway, so nothing hangs and the run is
  marked wrong) and issues ``fence.proxy.async.global`` (the activations were written by other CTAs through
  the generic proxy). It is never held by the consumer's epilogue: it fills up to ``STAGES`` chunks of the
  next tile while the consumer runs this tile's epilogue.
- the **consumer** (the default partition, one warpgroup): ``warpgroup_mma`` over the stages (one in flight),
  then the epilogue: Linear-1: SwiGLU of the packed (gate, up) columns (``refs.pack_w1``), bf16 into ``act``,
  a partition barrier and ``atomic_add(l2_full[row], 1, sem="release")``; Linear-2: scale by the router
  weight and store each row into its Combine destination (``dest_table[dest_rank] + dest_row * H``; padding
  rows masked).

What differs from ``kernel.py``: the skipped tile on a timed-out wait (this kernel computes it on stale
activations: the error flag says the run is invalid either way); the tile log's wait start is the mainloop start
(the wait is the loader's). Options: EARLY_ROWS (a Linear-2 tile's row destinations loaded before its
mainloop), DIRECT (Linear-2 stores from the accumulator's layout), PLACE (``placement``: programs per SM by
``%smid``), INSTRUMENT (tile log), COUNT_WRITES (written-once counter).
``gluon_args`` checks the options (pure: no torch, no triton), ``gluon_launch.launch_moe_gluon`` runs the kernel.
Importing this module imports triton (3.6's Gluon API): callers import it inside functions. GPU only (Gluon has
no interpreter); ``benchmarks/gpu/moe_gluon_compile.py`` compiles it for sm_90a on the CPU.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)



@gluon.jit
def _proxy_fence():
    """``fence.proxy.async.global``: the generic-proxy writes the acquire saw, before async-proxy (TMA) reads."""
    gl.inline_asm_elementwise("fence.proxy.async.global; mov.u32 $0, 0;", "=r", [], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def _wait_row(l2_full_ptr, row, need, spin_limit, error_ptr):
    """Acquire polls of ``l2_full[row]`` until it reaches ``need``, at most ``spin_limit``; sets the error flag
    on timeout."""
    seen = gl.atomic_add(l2_full_ptr + row, 0, sem="acquire")
    spins = 0
    while (seen < need) & (spins < spin_limit):
        seen = gl.atomic_add(l2_full_ptr + row, 0, sem="acquire")
        spins += 1
    if seen < need:
        gl.store(error_ptr, 1)


@gluon.jit
def _load_tile(a_desc, w_desc, a_row, w_row, K, a_bufs, w_bufs, ready, empty, it,
               BLOCK_K: gl.constexpr, STAGES: gl.constexpr):
    """TMA loads of one tile's K chunks into the stage ring from chunk counter ``it``; returns the counter after."""
    nbytes: gl.constexpr = a_desc.block_type.nbytes + w_desc.block_type.nbytes
    for k in range(0, K, BLOCK_K):
        s = it % STAGES
        mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)   # a fresh barrier counts as phase 1 done
        mbarrier.expect(ready.index(s), nbytes)
        tma.async_copy_global_to_shared(a_desc, [a_row, k], ready.index(s), a_bufs.index(s))
        tma.async_copy_global_to_shared(w_desc, [w_row, k], ready.index(s), w_bufs.index(s))
        it += 1
    return it


@gluon.jit
def _loader(x_desc, w1_desc, act_desc, w2_desc, tiles_ptr, t_first, t_last, l2_full_ptr, error_ptr, spin_limit,
            hidden, inter, a_bufs, w_bufs, ready, empty,
            BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr):
    """The loader partition: every chunk of every tile of this program, a Linear-2 tile after its row's wait."""
    it = 0
    for i in range(t_first, t_last):
        tile = tiles_ptr + i * 8
        kind = gl.load(tile + 0)
        expert = gl.load(tile + 1)
        n_block = gl.load(tile + 3)
        row = gl.load(tile + 6)
        if kind == 0:
            it = _load_tile(x_desc, w1_desc, row * BLOCK_M, expert * (2 * inter) + n_block * BLOCK_N, hidden,
                            a_bufs, w_bufs, ready, empty, it, BLOCK_K, STAGES)
        else:
            _wait_row(l2_full_ptr, row, gl.load(tile + 7), spin_limit, error_ptr)
            _proxy_fence()
            it = _load_tile(act_desc, w2_desc, row * BLOCK_M, expert * hidden + n_block * BLOCK_N, inter,
                            a_bufs, w_bufs, ready, empty, it, BLOCK_K, STAGES)


@gluon.jit
def _mma_tile(K, a_bufs, w_bufs, ready, empty, it, acc_layout: gl.constexpr,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr):
    """``acc = A W^T`` over one tile's chunks (one wgmma in flight; a stage is freed once its wgmma is done)."""
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
    prev = 0
    for k in range(0, K, BLOCK_K):
        s = it % STAGES
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s), w_bufs.index(s).permute((1, 0)), acc, use_acc=k > 0, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        if k > 0:
            mbarrier.arrive(empty.index(prev), count=1)
        prev = s
        it += 1
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.arrive(empty.index(prev), count=1)
    return acc, it


@gluon.jit
def _swiglu_out(acc, act_ptr, l2_full_ptr, row, n_block, inter, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                num_warps: gl.constexpr):
    """Linear-1 epilogue: ``silu(gate) * up`` of the packed columns (rows 2j, 2j + 1 of ``refs.pack_w1``) as bf16
    into ``act[row block, n_block * BN/2 :+ BN/2]``, then the row's release (after every thread's stores)."""
    HALF: gl.constexpr = BLOCK_N // 2
    h_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // HALF, HALF // 8], [num_warps, 1], [1, 0])
    gate, up = acc.reshape([BLOCK_M, HALF, 2]).split()
    h = gl.convert_layout((gate * (1.0 / (1.0 + gl.exp(-gate))) * up).to(act_ptr.dtype.element_ty), h_layout)
    rows = (row * BLOCK_M).to(gl.int64) + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, h_layout))
    cols = n_block * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(0, h_layout))
    gl.store(act_ptr + rows[:, None] * inter + cols[None, :], h)
    gl.thread_barrier()
    gl.atomic_add(l2_full_ptr + row, 1, sem="release")


@gluon.constexpr_function
def _store_layout(block_n, num_warps):
    """Rows of 64 columns (128 B) per 8 threads, 16-byte vectors: few rows per thread for the row pointers."""
    cols = min(block_n, 64)
    return gl.BlockedLayout([1, 8], [32 * 8 // cols, cols // 8], [num_warps, 1], [1, 0])


@gluon.jit
def _combine_rows(row, n_block, hidden, dest_rank_ptr, dest_row_ptr, weight_ptr, dest_table_ptr,
                  out_ty: gl.constexpr, acc_layout: gl.constexpr, st_layout: gl.constexpr,
                  BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """(router weight per row in the accumulator's row layout, the N tile's first Combine element per row and
    valid (dest_rank >= 0) in the store layout's row layout): ``dest_table[dest_rank] + dest_row * H + n*BN``."""
    rows_a = (row * BLOCK_M).to(gl.int64) + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    wt = gl.load(weight_ptr + rows_a)
    rows = (row * BLOCK_M).to(gl.int64) + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, st_layout))
    d_rank = gl.load(dest_rank_ptr + rows)
    valid = d_rank >= 0
    base = gl.load(dest_table_ptr + gl.where(valid, d_rank, 0)).to(gl.pointer_type(out_ty))
    row_ptr = base + (gl.load(dest_row_ptr + rows).to(gl.int64) * hidden + n_block * BLOCK_N)
    return wt, row_ptr, valid


@gluon.jit
def _combine_store(acc, wt, row_ptr, valid, out_ty: gl.constexpr, st_layout: gl.constexpr,
                   BLOCK_N: gl.constexpr, DIRECT: gl.constexpr):
    """Linear-2 epilogue: each row scaled by its router weight, bf16, stored at its Combine destination; padding
    rows masked. DIRECT: straight from the accumulator's layout (4-byte stores, no shared-memory round trip)."""
    out = (acc * wt[:, None]).to(out_ty)
    if not DIRECT:
        out = gl.convert_layout(out, st_layout)
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, st_layout))
    dst = gl.max_contiguous(gl.multiple_of(row_ptr[:, None] + cols[None, :], [1, 16]), [1, BLOCK_N])
    gl.store(dst, out, mask=valid[:, None])


@gluon.jit
def _stamp(INSTRUMENT: gl.constexpr):
    """%globaltimer (ns) when instrumented, else 0."""
    t = gl.to_tensor(0).to(gl.int64)
    if INSTRUMENT:
        t = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)
    return t


@gluon.jit
def _smid():
    return gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _log_tile(log_ptr, i, pid, t_first, t_ml0, t_ml1, t_end):
    """Row ``i`` of the tile log (``buffers.TILE_LOG_FIELDS``): the epilogue spans mainloop end to ``t_end``."""
    log = log_ptr + i * 8
    gl.store(log + 0, pid.to(gl.int64))
    gl.store(log + 1, _smid().to(gl.int64))
    gl.store(log + 2, (i - t_first).to(gl.int64))
    gl.store(log + 3, t_ml0)
    gl.store(log + 4, t_ml0)
    gl.store(log + 5, t_ml1)
    gl.store(log + 6, t_ml1)
    gl.store(log + 7, t_end)


@gluon.jit
def _count_writes(count_ptr, row, n_block, dest_rank_ptr, dest_row_ptr, combine_rows, l2_tiles,
                  BLOCK_M: gl.constexpr, layout: gl.constexpr):
    """``count[dest_rank, dest_row, n_block] += 1`` for every valid row of the tile (the written-once check)."""
    rows = (row * BLOCK_M).to(gl.int64) + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    d_rank = gl.load(dest_rank_ptr + rows)
    valid = d_rank >= 0
    slot = (gl.where(valid, d_rank, 0).to(gl.int64) * combine_rows + gl.load(dest_row_ptr + rows)) * l2_tiles + n_block
    gl.atomic_add(count_ptr + slot, gl.full([BLOCK_M], 1, gl.int32, gl.SliceLayout(1, layout)), mask=valid)


@gluon.jit
def _placed_span(offsets_ptr, place_ptr, slots_ptr, n_sm, error_ptr, PLACE: gl.constexpr):
    """(schedule program, first tile, one past its last) of this CTA: PLACE = 0 its program id; PLACE = P > 0 the
    next slot of its SM (``slots[smid]`` += 1) runs program ``place[smid * P + slot]`` (``placement``); an SM id or
    slot outside the map sets the error flag and runs nothing."""
    pid = gl.program_id(0)
    ok = True
    if PLACE > 0:
        sm = _smid()
        inside = sm < n_sm
        slot = gl.atomic_add(slots_ptr + gl.where(inside, sm, 0), 1, mask=inside)
        ok = inside & (slot < PLACE)
        pid = gl.load(place_ptr + gl.where(ok, sm * PLACE + slot, 0))
        if not ok:
            gl.store(error_ptr, 1)
    t_first = gl.load(offsets_ptr + pid)
    t_last = gl.load(offsets_ptr + pid + 1)
    t_last = gl.where(ok, t_last, t_first)
    return pid, t_first, t_last


@gluon.jit
def _consumer(act_ptr, tiles_ptr, pid, t_first, t_last, l2_full_ptr, dest_rank_ptr, dest_row_ptr, weight_ptr,
              dest_table_ptr, count_ptr, log_ptr, combine_rows, hidden, inter, a_bufs, w_bufs, ready, empty,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
              EARLY_ROWS: gl.constexpr, DIRECT: gl.constexpr, INSTRUMENT: gl.constexpr, COUNT_WRITES: gl.constexpr,
              num_warps: gl.constexpr):
    """The default partition: the MMAs and both epilogues of every tile of this program. EARLY_ROWS: a Linear-2
    tile loads its rows' destinations and router weights before its mainloop (their latency hidden behind it).
    INSTRUMENT: one ``buffers.TILE_LOG_FIELDS`` row per tile (the wait is the loader's: wait start = mainloop
    start here); COUNT_WRITES: ``count[rank, row, n_block] += 1`` per stored Combine row (checks)."""
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BLOCK_N, 16])
    out_ty: gl.constexpr = act_ptr.dtype.element_ty
    st_layout: gl.constexpr = acc_layout if DIRECT else _store_layout(BLOCK_N, num_warps)
    it = 0
    for i in range(t_first, t_last):
        tile = tiles_ptr + i * 8
        kind = gl.load(tile + 0)
        n_block = gl.load(tile + 3)
        row = gl.load(tile + 6)
        t_ml0 = _stamp(INSTRUMENT)
        if kind == 0:
            acc, it = _mma_tile(hidden, a_bufs, w_bufs, ready, empty, it, acc_layout, BLOCK_M, BLOCK_N, BLOCK_K,
                                STAGES)
            t_ml1 = _stamp(INSTRUMENT)
            _swiglu_out(acc, act_ptr, l2_full_ptr, row, n_block, inter, BLOCK_M, BLOCK_N, num_warps)
        else:
            if EARLY_ROWS:
                wt, row_ptr, valid = _combine_rows(row, n_block, hidden, dest_rank_ptr, dest_row_ptr, weight_ptr,
                                                   dest_table_ptr, out_ty, acc_layout, st_layout, BLOCK_M, BLOCK_N)
            acc, it = _mma_tile(inter, a_bufs, w_bufs, ready, empty, it, acc_layout, BLOCK_M, BLOCK_N, BLOCK_K,
                                STAGES)
            t_ml1 = _stamp(INSTRUMENT)
            if not EARLY_ROWS:
                wt, row_ptr, valid = _combine_rows(row, n_block, hidden, dest_rank_ptr, dest_row_ptr, weight_ptr,
                                                   dest_table_ptr, out_ty, acc_layout, st_layout, BLOCK_M, BLOCK_N)
            _combine_store(acc, wt, row_ptr, valid, out_ty, st_layout, BLOCK_N, DIRECT)
            if COUNT_WRITES:
                _count_writes(count_ptr, row, n_block, dest_rank_ptr, dest_row_ptr, combine_rows, hidden // BLOCK_N,
                              BLOCK_M, st_layout)
        if INSTRUMENT:
            _log_tile(log_ptr, i, pid, t_first, t_ml0, t_ml1, _stamp(INSTRUMENT))


@gluon.jit(do_not_specialize=["spin_limit"])
def _moe_ffn_gluon(x_desc, w1_desc, act_desc, w2_desc, act_ptr, tiles_ptr, offsets_ptr, l2_full_ptr, error_ptr,
                   dest_rank_ptr, dest_row_ptr, weight_ptr, dest_table_ptr, count_ptr, log_ptr, place_ptr, slots_ptr,
                   combine_rows, hidden, inter, spin_limit, n_sm,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
                   LOADER_REGS: gl.constexpr, EARLY_ROWS: gl.constexpr, DIRECT: gl.constexpr, PLACE: gl.constexpr,
                   INSTRUMENT: gl.constexpr, COUNT_WRITES: gl.constexpr, num_warps: gl.constexpr):
    """x / act descriptors over [rows*BM, H] / [rows*BM, I] (blocks [BM, BK]); w1 / w2 over [E*2I, H] /
    [E*H, I] (blocks [BN, BK]), w1 packed by ``refs.pack_w1``."""
    pid, t_first, t_last = _placed_span(offsets_ptr, place_ptr, slots_ptr, n_sm, error_ptr, PLACE)
    a_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w1_desc.dtype, [STAGES] + w1_desc.block_type.shape, w1_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (act_ptr, tiles_ptr, pid, t_first, t_last, l2_full_ptr, dest_rank_ptr, dest_row_ptr, weight_ptr,
                     dest_table_ptr, count_ptr, log_ptr, combine_rows, hidden, inter, a_bufs, w_bufs, ready, empty,
                     BLOCK_M, BLOCK_N, BLOCK_K, STAGES, EARLY_ROWS, DIRECT, INSTRUMENT, COUNT_WRITES, num_warps)),
        (_loader, (x_desc, w1_desc, act_desc, w2_desc, tiles_ptr, t_first, t_last, l2_full_ptr, error_ptr,
                   spin_limit, hidden, inter, a_bufs, w_bufs, ready, empty, BLOCK_M, BLOCK_N, BLOCK_K, STAGES)),
    ], [1], [LOADER_REGS])
