"""Fused MoE FFN of one expert-parallel rank: Linear-1 (gate, up) -> SwiGLU -> Linear-2 -> Combine stores.

A persistent Triton kernel (paper §2.2, §4.2, §5.2): program ``s`` walks
``tiles[sm_offsets[s]:sm_offsets[s+1]]``, the arrays exported by ``xstage.sim.schedules``
(``Schedule.to_arrays()``: expert-wave or interleaved with lead D), in order:

- L1 tile (kind 0, expert e, row p, n_block n): ``act[p rows, n*BN/2 : (n+1)*BN/2] =
  silu(x W_gate^T) * (x W_up^T)`` for that slice of intermediate columns, stored bf16, then a CTA
  barrier and ``atomic_add(l2_full[p], 1, sem="release")``. The kernel reads W1 packed by
  ``pack_w1``: row ``2j`` = gate row j, ``2j + 1`` = up row j, so one [BM, BN] MMA yields gate and up
  of BN/2 intermediate columns (split in registers) and the 2*I/BN L1 tiles of a row cover them once.
- L2 tile (kind 1): spins with ``atomic_add(l2_full[p], 0, sem="acquire")`` until it counts
  ``l2_need`` (all L1 tiles of row p); after ``spin_limit`` polls it sets ``error[0] = 1`` and skips
  the tile (never hangs). Then ``acc = act[p rows] W2[e][n cols]^T``; the epilogue scales each row by
  its router weight and stores it straight into the Combine buffer of the token's source rank
  (``dest_table[dest_rank]`` + ``dest_row``; padding rows masked).

Destinations (``Combine``): W buffers ``[combine_rows, hidden]`` bf16 and a device table of their base
addresses. On one GPU the own rank's buffer is device memory and the W-1 others are host-mapped
pinned buffers (``xstage.hw.common.hostmap``), so remote stores cross PCIe; ``Combine.local`` puts all W in
device memory (remote stores off). With W GPUs the table would hold symmetric-memory peer pointers.

Instrumentation (``tile_log``, off by default; GPU only: the interpreter cannot run inline asm): per
tile one row of ``TILE_LOG_FIELDS`` (%globaltimer ns). The Triton interpreter runs programs one after
another, so a cross-program l2_full wait only completes there when the L1 tiles sit in an earlier
program (tests use one program, or L1-then-L2 programs).

The tile pieces shared with the W8A8 kernel are in ``tiles.py``; buffers and tile arrays in ``buffers.py``;
dispatch, weights and the float32 reference in ``refs.py`` (torch only). This module imports triton:
callers import it inside functions.

CPU: ``TRITON_INTERPRET=1 pytest tests/hw/test_moe_kernel.py``; GPU: ``bash benchmarks/gpu/moe.sh``.
"""


import triton
import triton.language as tl

from xstage.errors import InputError
from xstage.hw.moe.buffers import SPIN_LIMIT, TILE_LOG_FIELDS, Combine, DeviceLayout, check_logs  # noqa: F401
from xstage.hw.moe.residency import check_resident, device_limits
from xstage.hw.moe.refs import compare, dispatch, pack_w1, random_weights, reference_moe  # noqa: F401 - re-exported
from xstage.hw.moe.tiles import (_act_fence, _combine_dst, _combine_rows, _count_writes, _log_tile, _mainloop_tma,
                                 _no_stamps, _placed_span, _release_row, _stamp, _tile_raw, _tile_wait)


@triton.jit(do_not_specialize=["combine_rows", "spin_limit"])
def _moe_ffn_kernel(x_ptr, w1_ptr, w2_ptr, act_ptr, act_desc, tiles_ptr, offsets_ptr, l2_full_ptr, error_ptr,
                    dest_rank_ptr, dest_row_ptr, weight_ptr, dest_table_ptr, count_ptr, log_ptr, place_ptr, slots_ptr,
                    hidden, inter, combine_rows, spin_limit, n_sm,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    INSTRUMENT: tl.constexpr, COUNT_WRITES: tl.constexpr, DOT_F32: tl.constexpr,
                    TMA: tl.constexpr, ACT_TMA: tl.constexpr, WS: tl.constexpr, PLACE: tl.constexpr,
                    EARLY_ROWS: tl.constexpr, PREFETCH: tl.constexpr):
    """TMA: x_ptr, w1_ptr, w2_ptr are host tensor descriptors over [rows*BM, H], [E*2I, H], [E*H, I]
    (blocks [BM, BK], [BN, BK], [BN, BK]); ACT_TMA: act_desc one over act [rows*BM, I] (blocks [BM, BK]),
    read after ``_act_fence``; else act (written during the launch) is read by pointer (.cg).
    PLACE: programs per SM placed by ``place_ptr`` (``_placed_span``), 0: program id = schedule program.
    EARLY_ROWS: a Linear-2 tile issues the loads of its rows' destinations before its mainloop;
    PREFETCH: the next tile's fields are loaded before this tile's mainloop."""
    HALF: tl.constexpr = BLOCK_N // 2
    pid, t_first, t_last = _placed_span(offsets_ptr, place_ptr, slots_ptr, n_sm, error_ptr, PLACE)
    offs_k = tl.arange(0, BLOCK_K)
    offs_h = tl.arange(0, HALF)
    offs_n = tl.arange(0, BLOCK_N)
    l2_tiles = hidden // BLOCK_N
    out_ty = act_ptr.dtype.element_ty
    if PREFETCH:
        nk, ne, nn, nr, nd = _tile_raw(tiles_ptr, t_first, t_first < t_last)
    for i in range(t_first, t_last):
        if PREFETCH:
            kind, expert32, n_block, row, need = nk, ne, nn, nr, nd
            nk, ne, nn, nr, nd = _tile_raw(tiles_ptr, i + 1, i + 1 < t_last)
        else:
            kind, expert32, n_block, row, need = _tile_raw(tiles_ptr, i, i < t_last)
        expert = expert32.to(tl.int64)
        offs_m = row.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        run, t_wait, t_ml0 = _tile_wait(kind, l2_full_ptr, row, need, spin_limit, error_ptr, INSTRUMENT)
        t_ml1, t_is0, t_is1 = _no_stamps()
        if (run == 1) & (kind == 0):
            if TMA:
                acc = _mainloop_tma(x_ptr, w1_ptr, row * BLOCK_M, expert32 * (2 * inter) + n_block * BLOCK_N, hidden,
                                    BLOCK_M, BLOCK_N, BLOCK_K, DOT_F32, WS)
            else:
                acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                a_ptrs = x_ptr + offs_m[:, None] * hidden + offs_k[None, :]
                w_ptrs = w1_ptr + expert * (2 * inter * hidden) \
                    + (n_block * BLOCK_N + offs_n)[None, :].to(tl.int64) * hidden + offs_k[:, None]
                for _k in range(0, hidden, BLOCK_K):
                    a = tl.load(a_ptrs)
                    w = tl.load(w_ptrs)
                    if DOT_F32:  # the interpreter multiplies bf16 as raw integers: upcast there
                        a, w = a.to(tl.float32), w.to(tl.float32)
                    acc = tl.dot(a, w, acc)
                    a_ptrs += BLOCK_K
                    w_ptrs += BLOCK_K
            t_ml1 = _stamp(INSTRUMENT)
            gate, up = tl.split(tl.reshape(acc, [BLOCK_M, HALF, 2]))  # packed rows 2j, 2j+1
            h = gate * tl.sigmoid(gate) * up
            t_is0 = _stamp(INSTRUMENT)
            tl.store(act_ptr + offs_m[:, None] * inter + (n_block * HALF + offs_h)[None, :], h.to(out_ty))
            _release_row(l2_full_ptr, row)
            t_is1 = _stamp(INSTRUMENT)
        if (run == 1) & (kind == 1):
            if EARLY_ROWS:
                d_rank, d_row, wt, valid, base = _combine_rows(dest_rank_ptr, dest_row_ptr, weight_ptr,
                                                               dest_table_ptr, offs_m, out_ty)
            if ACT_TMA:
                _act_fence(ACT_TMA, DOT_F32)
                acc = _mainloop_tma(act_desc, w2_ptr, row * BLOCK_M, expert32 * hidden + n_block * BLOCK_N, inter,
                                    BLOCK_M, BLOCK_N, BLOCK_K, DOT_F32, WS)
            else:
                a_ptrs = act_ptr + offs_m[:, None] * inter + offs_k[None, :]
                acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                if TMA:
                    for k in range(0, inter, BLOCK_K):
                        a = tl.load(a_ptrs, cache_modifier=".cg")  # written by other SMs: bypass L1
                        w = tl.trans(w2_ptr.load([expert32 * hidden + n_block * BLOCK_N, k]))
                        if DOT_F32:
                            a, w = a.to(tl.float32), w.to(tl.float32)
                        acc = tl.dot(a, w, acc)
                        a_ptrs += BLOCK_K
                else:
                    w_ptrs = w2_ptr + expert * (hidden * inter) \
                        + (n_block * BLOCK_N + offs_n)[None, :].to(tl.int64) * inter + offs_k[:, None]
                    for _k in range(0, inter, BLOCK_K):
                        a = tl.load(a_ptrs, cache_modifier=".cg")
                        w = tl.load(w_ptrs)
                        if DOT_F32:
                            a, w = a.to(tl.float32), w.to(tl.float32)
                        acc = tl.dot(a, w, acc)
                        a_ptrs += BLOCK_K
                        w_ptrs += BLOCK_K
            t_ml1 = _stamp(INSTRUMENT)
            if not EARLY_ROWS:
                d_rank, d_row, wt, valid, base = _combine_rows(dest_rank_ptr, dest_row_ptr, weight_ptr,
                                                               dest_table_ptr, offs_m, out_ty)
            cols = n_block * BLOCK_N + offs_n
            out = (acc * wt[:, None]).to(out_ty)
            t_is0 = _stamp(INSTRUMENT)
            tl.store(_combine_dst(base, d_row, cols, hidden, BLOCK_N), out, mask=valid[:, None])
            t_is1 = _stamp(INSTRUMENT)
            if COUNT_WRITES:
                _count_writes(count_ptr, valid, d_rank, d_row, n_block, combine_rows, l2_tiles, BLOCK_M)
        if INSTRUMENT:
            _log_tile(log_ptr, i, pid, t_first, t_wait, t_ml0, t_ml1, t_is0, t_is1)


def interpreting() -> bool:
    """True when the kernel runs in the Triton interpreter (TRITON_INTERPRET=1 at import)."""
    return type(_moe_ffn_kernel).__name__ == "InterpretedFunction"


def launch_moe(x_recv, w1, w2, act, dev: DeviceLayout, combine: Combine, *, block_k: int = 64,
               num_warps: int = 8, num_stages: int = 3, tma: bool = False, act_tma: bool = False, ws: bool = False,
               maxnreg: int | None = None, place: bool = False, early_rows: bool = False, prefetch: bool = False,
               tile_log=None, write_count=None, spin_limit: int = SPIN_LIMIT) -> None:
    """Reset l2_full and run the persistent kernel over ``dev``'s schedule.

    ``x_recv`` [rows*BM, H] bf16 (receive layout), ``w1`` [E, 2I, H] packed by ``pack_w1``, ``w2`` [E, H, I], ``act``
    [rows*BM, I] scratch. ``tma``: x and weights through tensor descriptors; ``act_tma``: the Linear-2
    activations too (needs ``tma``); ``ws``: warp-specialized TMA mainloops. ``maxnreg``: register cap per
    thread (lets two programs share an SM). ``tile_log``: int64 [T, 8] (GPU only). ``write_count``: int32
    [W, combine_rows, H/BN] incremented once per stored (row, N tile). A schedule of more programs than SMs
    (e.g. 2 x 132) runs only if every program is resident at once (``residency.check_resident``: the
    Linear-2 tiles spin on other programs' Linear-1 tiles); otherwise InputError before the launch.
    ``place`` (GPU, a schedule of k x SMs programs, k >= 2): each SM runs a heavy and a light program
    (``placement.balanced_placement``, read by SM id and slot); ``early_rows``: a Linear-2 tile loads its
    rows' destinations before its mainloop; ``prefetch``: the next tile's fields load before this mainloop.
    None of the three changes the tiles or their order per program.
    """
    p = dev.layout.problem
    H, I, E, rows = p.hidden, p.intermediate, p.local_experts, dev.layout.recv_rows
    for name, t, shape in (("x_recv", x_recv, (rows, H)), ("w1", w1, (E, 2 * I, H)), ("w2", w2, (E, H, I)),
                           ("act", act, (rows, I))):
        if tuple(t.shape) != shape or not t.is_contiguous() or t.dtype != x_recv.dtype:
            raise InputError(f"{name}", (tuple(t.shape), str(t.dtype)), f"must be a contiguous {shape} tensor "
                             f"of x_recv's dtype")
    if H % 8 or any(ptr % 16 for ptr in combine.pointers):
        raise InputError("hidden/combine buffers", (H, [hex(p_) for p_ in combine.pointers]),
                         "must be a multiple of 8 / 16-byte aligned (the epilogue stores 16-byte vectors)")
    if H % block_k or I % block_k:
        raise InputError("block_k", block_k, f"must divide hidden={H} and intermediate={I}")
    if act_tma and not tma:
        raise InputError("act_tma", act_tma, "needs tma=True (the weights through descriptors too)")
    spin_limit = check_logs(dev, tile_log, write_count, spin_limit, interpreting())
    act_desc = act
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        bm, bn = p.block_m, p.block_n
        x_recv = TensorDescriptor(x_recv, [rows, H], [H, 1], [bm, block_k])
        w1 = TensorDescriptor(w1, [E * 2 * I, H], [H, 1], [bn, block_k])
        w2 = TensorDescriptor(w2, [E * H, I], [I, 1], [bn, block_k])
        if act_tma:
            act_desc = TensorDescriptor(act, [rows, I], [I, 1], [bm, block_k])
    per_sm, place_map, slots, n_sm = 0, dev.error, dev.error, 1
    if place:
        if interpreting():
            raise InputError("place", place, "needs a GPU (the kernel reads %smid)")
        n_sm = device_limits()[0]
        if dev.num_programs >= 2 * n_sm:
            per_sm = dev.num_programs // n_sm
            place_map, slots = dev.placement(n_sm, per_sm)
    args = (x_recv, w1, w2, act, act_desc, dev.tiles, dev.offsets, dev.l2_full, dev.error,
            dev.dest_rank, dev.dest_row, dev.weight, combine.table,
            write_count if write_count is not None else dev.error, tile_log if tile_log is not None else dev.error,
            place_map, slots, H, I, p.combine_rows, spin_limit, n_sm)
    opts = dict(BLOCK_M=p.block_m, BLOCK_N=p.block_n, BLOCK_K=block_k, INSTRUMENT=tile_log is not None,
                COUNT_WRITES=write_count is not None, DOT_F32=interpreting(), TMA=tma, ACT_TMA=act_tma, WS=ws,
                PLACE=per_sm, EARLY_ROWS=bool(early_rows), PREFETCH=bool(prefetch),
                num_warps=num_warps, num_stages=num_stages, **({"maxnreg": maxnreg} if maxnreg else {}))
    if not interpreting():
        check_resident(_moe_ffn_kernel, args, opts, dev.num_programs)
    dev.l2_full.zero_()
    if per_sm:
        slots.zero_()
    _moe_ffn_kernel[(dev.num_programs,)](*args, **opts)


@triton.jit
def _combine_copy_kernel(y_ptr, dest_rank_ptr, dest_row_ptr, dest_table_ptr, rows, hidden,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The baseline's separate Combine: packed rows ``y [rows, H]`` to their source ranks' buffers."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    in_range = offs_m < rows
    d_rank = tl.load(dest_rank_ptr + offs_m, mask=in_range, other=0)
    d_row = tl.load(dest_row_ptr + offs_m, mask=in_range, other=0).to(tl.int64)
    y = tl.load(y_ptr + offs_m.to(tl.int64)[:, None] * hidden + cols[None, :], mask=in_range[:, None])
    base = tl.load(dest_table_ptr + d_rank).to(tl.pointer_type(y_ptr.dtype.element_ty))
    dst = tl.max_contiguous(tl.multiple_of(base[:, None] + d_row[:, None] * hidden + cols[None, :], [1, 16]),
                            [1, BLOCK_N])
    tl.store(dst, y, mask=in_range[:, None])


def launch_combine_copy(y_packed, dest_rank, dest_row, combine: "Combine", block_m: int = 64,
                        block_n: int = 128, num_warps: int = 4) -> None:
    """Store packed rows ``y_packed [n, H]`` (receive order without padding) into the Combine buffers."""
    n, H = y_packed.shape
    if H % 8 or any(ptr % 16 for ptr in combine.pointers):
        raise InputError("hidden/combine buffers", H, "must be a multiple of 8 / 16-byte aligned")
    if y_packed.dtype != combine.buffers[0].dtype or not y_packed.is_contiguous() or n != len(dest_rank):
        raise InputError("y_packed", (tuple(y_packed.shape), str(y_packed.dtype)),
                         f"must be contiguous, {combine.buffers[0].dtype}, one row per destination")
    if H % block_n:
        raise InputError("block_n", block_n, f"must divide hidden={H}")
    _combine_copy_kernel[(triton.cdiv(n, block_m), H // block_n)](
        y_packed, dest_rank, dest_row, combine.table, n, H, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
