"""The fused bf16 MoE FFN as ONE software-pipelined loop over (tile, K chunk) steps (issue 17, short K).

``kernel._moe_ffn_kernel`` runs each tile's K loop on its own: the pipeline fills at every tile start and
drains before every epilogue, a fixed cost per tile that dominates where K is short. Here the persistent loop
walks the same tiles in the same per-program order (``Schedule.to_arrays()``), each cut into K chunks of
``C = gcd(H, I)`` columns (``flat_steps.step_arrays``), with a K loop of fixed length C inside. Because that
inner loop's bounds do not depend on the step, ``tl.range(..., flatten=True)`` fuses the two loops and the
software pipeliner prefetches the next step's first K blocks while this step's last MMAs and its epilogue
run. To read both GEMMs through one pair of descriptors, x and act sit side by side in one buffer
(``flat_steps.side_by_side``: [rows, H + I]) and both weights in one chunk-major tensor
(``flat_steps.chunked_weights``).

Ordering: a Linear-2 tile's wait (``_wait_row``, not inlined, so the fused loop holds no nested loop and is
pipelined) and the proxy fence are data dependencies of its loads' row coordinate, so the compiler cannot
issue the loads before the acquire saw the row complete; the pipeline runs them a step early, i.e. before the
previous tile's epilogue. Where that could make programs wait on each other in a cycle, the program's list is cut
into segments (``flat_steps.flat_breaks``: the pipelined loop runs per segment, and drains between segments as
``kernel.py`` does after every tile). A wait that times out sets the error flag, reads rows past the end (zeros)
and skips the tile's stores.

Measured on the H200 (triton 3.6, ``data/moe/flat-tune-b4b9c17``, ``flat-tune-c8b23bc-dit``): correct on every
point, but 2-2.5x slower than the per-tile kernel at two programs per SM (the fused loop spills the accumulator
under the 128-register cap and runs CTA barriers every K iteration), so it is an option (``--short-k-kernel
'{"flat": true}'``, where H = I), not the default; docs/moe/quack.md says what was tried.

Instrumented (``tile_log``): wait start / mainloop start are stamped at the tile's first step (in the
pipeline's time, i.e. up to a few K blocks early), mainloop end / issue start / issue end in its epilogue.
"""

import triton
import triton.language as tl

from xstage.errors import InputError
from xstage.hw.moe.buffers import check_logs
from xstage.hw.moe.flat_steps import chunk_k, flat_breaks, segment_arrays, step_arrays
from xstage.hw.moe.residency import check_resident
from xstage.hw.moe.tiles import _combine_dst, _combine_rows, _count_writes, _log_tile, _release_row, _stamp, _tile_raw


@triton.jit(noinline=True)
def _wait_row(l2_full_ptr, row, need, spin_limit, error_ptr):
    """1 once ``need`` Linear-1 tiles of ``row`` are released (acquire, at most ``spin_limit`` polls), else the
    error flag is set and 0."""
    seen = tl.atomic_add(l2_full_ptr + row, 0, sem="acquire")
    spins = 0
    while (seen < need) & (spins < spin_limit):
        seen = tl.atomic_add(l2_full_ptr + row, 0, sem="acquire")
        spins += 1
    run = 1
    if seen < need:
        tl.store(error_ptr, 1)
        run = 0
    return run


@triton.jit
def _proxy_fence(DOT_F32: tl.constexpr):
    """0, after ``fence.proxy.async.global`` (GPU): TMA reads issued after it see what the acquire saw."""
    z = tl.full([], 0, tl.int32)
    if not DOT_F32:
        z = tl.inline_asm_elementwise("fence.proxy.async.global; mov.u32 $0, 0;", "=r", [], dtype=tl.int32,
                                      is_pure=False, pack=1)
    return z


@triton.jit
def _release_row_asm(l2_full_ptr, row):
    """``tiles._release_row`` with the CTA barrier as inline asm (``tl.debug_barrier`` keeps the pipeliner off the
    fused loop): every thread's stores precede the release of ``l2_full[row] += 1``."""
    tl.inline_asm_elementwise("bar.sync 0; mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    tl.atomic_add(l2_full_ptr + row, 1, sem="release")


@triton.jit(do_not_specialize=["combine_rows", "spin_limit"])
def _moe_flat_kernel(xa_desc, w_desc, xa_ptr, tiles_ptr, steps_ptr, seg_start_ptr, seg_off_ptr, l2_full_ptr, error_ptr,
                     dest_rank_ptr, dest_row_ptr, weight_ptr, dest_table_ptr, count_ptr, log_ptr,
                     hidden, inter, n_experts, recv_rows, combine_rows, spin_limit,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, CHUNK: tl.constexpr,
                     INSTRUMENT: tl.constexpr, COUNT_WRITES: tl.constexpr, DOT_F32: tl.constexpr,
                     ONE_CHUNK: tl.constexpr):
    HALF: tl.constexpr = BLOCK_N // 2
    pid = tl.program_id(0)
    g_first = tl.load(seg_off_ptr + pid)
    g_last = tl.load(seg_off_ptr + pid + 1)
    s_first = tl.load(seg_start_ptr + g_first)
    t_first = tl.load(steps_ptr + 2 * s_first, mask=g_first < g_last, other=0)
    l1_chunks = hidden // CHUNK
    l2_chunks = inter // CHUNK
    l2_w_base = l1_chunks * n_experts * 2 * inter
    row_stride = hidden + inter
    l2_tiles = hidden // BLOCK_N
    offs_h = tl.arange(0, HALF)
    offs_n = tl.arange(0, BLOCK_N)
    out_ty = xa_ptr.dtype.element_ty
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    run = tl.full([], 1, tl.int32)
    t_wait = tl.full([], 0, tl.int64)
    t_ml0 = tl.full([], 0, tl.int64)
    g = g_first
    while g < g_last:  # a while, not a for: loop fusion takes only two-loop nests (segment steps x K)
        for s in tl.range(tl.load(seg_start_ptr + g), tl.load(seg_start_ptr + g + 1), flatten=True):
            i = tl.load(steps_ptr + 2 * s)
            c = tl.load(steps_ptr + 2 * s + 1)
            kind, expert, n_block, row, need = _tile_raw(tiles_ptr, i, i >= 0)
            if c == 0:
                t_wait = _stamp(INSTRUMENT)
                run = tl.full([], 1, tl.int32)
                if kind == 1:
                    run = _wait_row(l2_full_ptr, row, need, spin_limit, error_ptr) + _proxy_fence(DOT_F32)
                t_ml0 = _stamp(INSTRUMENT)
            a_row = tl.where(run == 1, row * BLOCK_M, recv_rows)
            a_col = tl.where(kind == 0, c * CHUNK, hidden + c * CHUNK)
            w_row = tl.where(kind == 0, c * (n_experts * 2 * inter) + expert * (2 * inter) + n_block * BLOCK_N,
                             l2_w_base + c * (n_experts * hidden) + expert * hidden + n_block * BLOCK_N)
            if ONE_CHUNK:  # every step a whole tile: a fresh accumulator, which Triton's pipeliner keeps pipelined
                acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            else:          # carried over a tile's chunks: correct, but Triton 3.6 then runs the loop unpipelined
                acc = tl.where(c == 0, 0.0, acc)
            for k in range(0, CHUNK, BLOCK_K):
                a = xa_desc.load([a_row, a_col + k])
                w = tl.trans(w_desc.load([w_row, k]))
                if DOT_F32:  # the interpreter multiplies bf16 as raw integers: upcast there
                    a, w = a.to(tl.float32), w.to(tl.float32)
                acc = tl.dot(a, w, acc)
            n_chunks = tl.where(kind == 0, l1_chunks, l2_chunks)
            if c == n_chunks - 1:
                t_ml1 = _stamp(INSTRUMENT)
                t_is0 = t_ml1
                offs_m = row.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
                if kind == 0:
                    gate, up = tl.split(tl.reshape(acc, [BLOCK_M, HALF, 2]))  # packed rows 2j, 2j+1
                    h = gate * tl.sigmoid(gate) * up
                    t_is0 = _stamp(INSTRUMENT)
                    tl.store(xa_ptr + offs_m[:, None] * row_stride + hidden + (n_block * HALF + offs_h)[None, :],
                             h.to(out_ty))
                    if DOT_F32:
                        _release_row(l2_full_ptr, row)
                    else:
                        _release_row_asm(l2_full_ptr, row)
                if (kind == 1) & (run == 1):
                    d_rank, d_row, wt, valid, base = _combine_rows(dest_rank_ptr, dest_row_ptr, weight_ptr,
                                                                   dest_table_ptr, offs_m, out_ty)
                    cols = n_block * BLOCK_N + offs_n
                    out = (acc * wt[:, None]).to(out_ty)
                    t_is0 = _stamp(INSTRUMENT)
                    tl.store(_combine_dst(base, d_row, cols, hidden, BLOCK_N), out, mask=valid[:, None])
                    if COUNT_WRITES:
                        _count_writes(count_ptr, valid, d_rank, d_row, n_block, combine_rows, l2_tiles, BLOCK_M)
                t_is1 = _stamp(INSTRUMENT)
                if INSTRUMENT:
                    _log_tile(log_ptr, i, pid, t_first, t_wait, t_ml0, t_ml1, t_is0, t_is1)
        g += 1


def interpreting() -> bool:
    """True when this kernel runs in the Triton interpreter (TRITON_INTERPRET=1 at import)."""
    return type(_moe_flat_kernel).__name__ == "InterpretedFunction"


class FlatLayout:
    """A schedule's step and segment arrays on the device (``flat_steps``), built once per DeviceLayout."""

    def __init__(self, dev, chunk: int):
        import torch

        p = dev.layout.problem
        offsets = dev.offsets.cpu().numpy()
        steps, step_off = step_arrays(dev.tiles_np, offsets, p.hidden, p.intermediate, chunk)
        self.breaks = flat_breaks(dev.tiles_np, offsets, dev.layout.grid.rows)
        seg_start, seg_off = segment_arrays(self.breaks, step_off, steps)
        self.chunk, self.segments = chunk, len(seg_start) - 1
        self.steps = torch.as_tensor(steps, device=dev.tiles.device)
        self.seg_start = torch.as_tensor(seg_start, device=dev.tiles.device)
        self.seg_off = torch.as_tensor(seg_off, device=dev.tiles.device)


def flat_layout(dev, chunk: int) -> FlatLayout:
    """The (cached) step arrays of ``dev``'s schedule for K chunk ``chunk``."""
    cache = dev.__dict__.setdefault("_flat", {})
    if chunk not in cache:
        cache[chunk] = FlatLayout(dev, chunk)
    return cache[chunk]


def launch_moe_flat(xa, w_chunked, dev, combine, *, block_k: int = 64, num_warps: int = 8, num_stages: int = 3,
                    maxnreg: int | None = None, tile_log=None, write_count=None, spin_limit=None,
                    interpreted: bool = False) -> None:
    """Reset l2_full and run the flattened kernel over ``dev``'s schedule: ``xa`` [rows, H + I] bf16 (x and the
    activation scratch side by side, ``flat_steps.side_by_side``), ``w_chunked`` from ``flat_steps.chunked_weights``.
    InputError when the programs cannot all be resident."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    from xstage.hw.moe.buffers import SPIN_LIMIT

    p = dev.layout.problem
    H, I, E, rows = p.hidden, p.intermediate, p.local_experts, dev.layout.recv_rows
    chunk = chunk_k(H, I, block_k)
    if tuple(xa.shape) != (rows, H + I) or not xa.is_contiguous():
        raise InputError("xa", tuple(xa.shape), f"must be a contiguous ({rows}, {H + I}) tensor")
    n_w = (H // chunk) * E * 2 * I + (I // chunk) * E * H
    if tuple(w_chunked.shape) != (n_w, chunk) or not w_chunked.is_contiguous() or w_chunked.dtype != xa.dtype:
        raise InputError("w_chunked", tuple(w_chunked.shape), f"must be a contiguous ({n_w}, {chunk}) tensor of xa's dtype")
    if H % 8 or any(ptr % 16 for ptr in combine.pointers):
        raise InputError("hidden/combine buffers", H, "must be a multiple of 8 / 16-byte aligned")
    fl = flat_layout(dev, chunk)
    spin_limit = check_logs(dev, tile_log, write_count, SPIN_LIMIT if spin_limit is None else spin_limit, interpreted)
    bm, bn = p.block_m, p.block_n
    xa_desc = TensorDescriptor(xa, [rows, H + I], [H + I, 1], [bm, block_k])
    w_desc = TensorDescriptor(w_chunked, [n_w, chunk], [chunk, 1], [bn, block_k])
    args = (xa_desc, w_desc, xa, dev.tiles, fl.steps, fl.seg_start, fl.seg_off, dev.l2_full, dev.error, dev.dest_rank,
            dev.dest_row, dev.weight, combine.table, write_count if write_count is not None else dev.error,
            tile_log if tile_log is not None else dev.error, H, I, E, rows, p.combine_rows, spin_limit)
    opts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=block_k, CHUNK=chunk, ONE_CHUNK=H == I, INSTRUMENT=tile_log is not None,
                COUNT_WRITES=write_count is not None, DOT_F32=interpreted, num_warps=num_warps,
                num_stages=num_stages, **({"maxnreg": maxnreg} if maxnreg else {}))
    if not interpreted:
        check_resident(_moe_flat_kernel, args, opts, dev.num_programs)
    dev.l2_full.zero_()
    _moe_flat_kernel[(dev.num_programs,)](*args, **opts)
