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

CPU: ``TRITON_INTERPRET=1 pytest tests/hw/test_moe_kernel.py``; GPU: ``bash benchmarks/gpu/moe.sh``.
"""

from pathlib import Path

import numpy as np
import triton
import triton.language as tl

from xstage.errors import InputError
from xstage.hw.common.ptx import _globaltimer, _smid
from xstage.sim.workloads.moe_layout import DispatchLayout

TILE_LOG_FIELDS = ("program", "sm", "seq", "wait_start_ns", "mainloop_start_ns", "mainloop_end_ns",
                   "issue_start_ns", "issue_end_ns")
SPIN_LIMIT = 1 << 22


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


@triton.jit(do_not_specialize=["combine_rows", "spin_limit"])
def _moe_ffn_kernel(x_ptr, w1_ptr, w2_ptr, act_ptr, tiles_ptr, offsets_ptr, l2_full_ptr, error_ptr,
                    dest_rank_ptr, dest_row_ptr, weight_ptr, dest_table_ptr, count_ptr, log_ptr,
                    hidden, inter, combine_rows, spin_limit,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    INSTRUMENT: tl.constexpr, COUNT_WRITES: tl.constexpr, DOT_F32: tl.constexpr,
                    TMA: tl.constexpr):
    """TMA: x_ptr, w1_ptr, w2_ptr are host tensor descriptors over [rows*BM, H], [E*2I, H], [E*H, I]
    (blocks [BM, BK], [BN, BK], [BN, BK]); act (written during the launch) is always read by pointer."""
    HALF: tl.constexpr = BLOCK_N // 2
    pid = tl.program_id(0)
    t_first = tl.load(offsets_ptr + pid)
    t_last = tl.load(offsets_ptr + pid + 1)
    offs_k = tl.arange(0, BLOCK_K)
    offs_h = tl.arange(0, HALF)
    offs_n = tl.arange(0, BLOCK_N)
    l2_tiles = hidden // BLOCK_N
    out_ty = act_ptr.dtype.element_ty
    for i in range(t_first, t_last):
        tile = tiles_ptr + i * 8
        kind = tl.load(tile + 0)
        expert32 = tl.load(tile + 1)
        expert = expert32.to(tl.int64)
        n_block = tl.load(tile + 3)
        row = tl.load(tile + 6)
        need = tl.load(tile + 7)
        offs_m = row.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        t_wait = tl.full([], 0, tl.int64)
        if INSTRUMENT:
            t_wait = _globaltimer()
        run = 1
        if kind == 1:  # Linear-2 waits for every Linear-1 tile of its row (bounded spin, acquire)
            run = _wait_l2_full(l2_full_ptr, row, need, spin_limit, error_ptr)
        t_ml0 = tl.full([], 0, tl.int64)
        t_ml1 = tl.full([], 0, tl.int64)
        t_is0 = tl.full([], 0, tl.int64)
        t_is1 = tl.full([], 0, tl.int64)
        if INSTRUMENT:
            t_ml0 = _globaltimer()
        if (run == 1) & (kind == 0):
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            if TMA:
                for k in range(0, hidden, BLOCK_K):
                    a = x_ptr.load([row * BLOCK_M, k])
                    w = tl.trans(w1_ptr.load([expert32 * (2 * inter) + n_block * BLOCK_N, k]))
                    if DOT_F32:
                        a, w = a.to(tl.float32), w.to(tl.float32)
                    acc = tl.dot(a, w, acc)
            else:
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
            if INSTRUMENT:
                t_ml1 = _globaltimer()
            gate, up = tl.split(tl.reshape(acc, [BLOCK_M, HALF, 2]))  # packed rows 2j, 2j+1
            h = gate * tl.sigmoid(gate) * up
            if INSTRUMENT:
                t_is0 = _globaltimer()
            tl.store(act_ptr + offs_m[:, None] * inter + (n_block * HALF + offs_h)[None, :], h.to(out_ty))
            tl.debug_barrier()  # every thread's act stores precede the release below
            tl.atomic_add(l2_full_ptr + row, 1, sem="release")
            if INSTRUMENT:
                t_is1 = _globaltimer()
        if (run == 1) & (kind == 1):
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
            if INSTRUMENT:
                t_ml1 = _globaltimer()
            d_rank = tl.load(dest_rank_ptr + offs_m)
            d_row = tl.load(dest_row_ptr + offs_m).to(tl.int64)
            wt = tl.load(weight_ptr + offs_m)
            valid = d_rank >= 0
            base = tl.load(dest_table_ptr + tl.where(valid, d_rank, 0)).to(tl.pointer_type(out_ty))
            cols = n_block * BLOCK_N + offs_n
            out = (acc * wt[:, None]).to(out_ty)
            if INSTRUMENT:
                t_is0 = _globaltimer()
            dst = base[:, None] + d_row[:, None] * hidden + cols[None, :]
            # destination buffers are 16-byte aligned and hidden % 8 == 0: let the stores vectorize
            dst = tl.max_contiguous(tl.multiple_of(dst, [1, 16]), [1, BLOCK_N])
            tl.store(dst, out, mask=valid[:, None])
            if INSTRUMENT:
                t_is1 = _globaltimer()
            if COUNT_WRITES:
                slot = (tl.where(valid, d_rank, 0).to(tl.int64) * combine_rows + d_row) * l2_tiles + n_block
                tl.atomic_add(count_ptr + slot, tl.full([BLOCK_M], 1, tl.int32), mask=valid)
        if INSTRUMENT:
            log = log_ptr + i * 8
            tl.store(log + 0, pid.to(tl.int64))
            tl.store(log + 1, _smid().to(tl.int64))
            tl.store(log + 2, (i - t_first).to(tl.int64))
            tl.store(log + 3, t_wait)
            tl.store(log + 4, t_ml0)
            tl.store(log + 5, t_ml1)
            tl.store(log + 6, t_is0)
            tl.store(log + 7, t_is1)


def interpreting() -> bool:
    """True when the kernel runs in the Triton interpreter (TRITON_INTERPRET=1 at import)."""
    return type(_moe_ffn_kernel).__name__ == "InterpretedFunction"


class Combine:
    """The W Combine buffers ``[combine_rows, hidden]`` bf16 of one problem and their pointer table."""

    def __init__(self, layout: DispatchLayout, device, *, remote: bool = True):
        import torch

        from xstage.hw.common.hostmap import pinned_buffer

        p = layout.problem
        device = torch.device(device)
        self.layout, self.remote = layout, remote and device.type == "cuda"
        self.buffers, pointers = [], []
        shape = (p.combine_rows, p.hidden)
        for r in range(p.world_size):
            if r == p.rank or not self.remote:
                t = torch.empty(shape, dtype=torch.bfloat16, device=device)
                ptr = t.data_ptr()
            else:
                t, ptr = pinned_buffer(shape, torch.bfloat16)
            self.buffers.append(t)
            pointers.append(int(ptr))
        self.pointers = pointers
        self.table = torch.tensor(pointers, dtype=torch.int64, device=device)

    def poison(self) -> None:
        for b in self.buffers:
            b.fill_(float("nan"))

    def gather(self, device) -> "object":
        """This GPU's rows in receive order, float32 ``[recv_rows, hidden]`` (padding rows zero)."""
        import torch

        lay = self.layout
        out = torch.zeros((lay.recv_rows, lay.problem.hidden), dtype=torch.float32, device=device)
        v = np.flatnonzero(lay.valid)
        for r, buf in enumerate(self.buffers):
            sel = v[lay.dest_rank[v] == r]
            if len(sel):
                rows = torch.as_tensor(lay.dest_row[sel].astype(np.int64), device=device)
                out[torch.as_tensor(sel, device=device)] = buf.to(device).index_select(0, rows).float()
        return out

    def check(self, ref) -> dict:
        """Compare with ``ref`` (float32 ``[recv_rows, hidden]``); count unwritten and stray elements
        (stray: non-poison elements outside this GPU's rows)."""
        import torch

        lay = self.layout
        got = self.gather(ref.device)
        valid = torch.as_tensor(lay.valid, device=ref.device)
        unwritten = int(torch.isnan(got[valid]).sum())
        written_total = sum(int((~torch.isnan(b.to(ref.device))).sum()) for b in self.buffers)
        stray = written_total - (int(valid.sum()) * lay.problem.hidden - unwritten)
        res = compare(got[valid], ref[valid])
        return {**res, "unwritten": unwritten, "stray": stray,
                "ok": unwritten == 0 and stray == 0 and res["ok"]}


class DeviceLayout:
    """The layout's per-row arrays and a schedule's tile arrays as device tensors."""

    def __init__(self, layout: DispatchLayout, schedule_arrays: dict, device):
        import torch

        self.layout = layout
        self.dest_rank = torch.as_tensor(layout.dest_rank, device=device)
        self.dest_row = torch.as_tensor(layout.dest_row, device=device)
        self.weight = torch.as_tensor(layout.weight, device=device)
        tiles = np.ascontiguousarray(schedule_arrays["tiles"], dtype=np.int32)
        offsets = np.ascontiguousarray(schedule_arrays["sm_offsets"], dtype=np.int32)
        if len(tiles) and int(tiles[:, 6].max()) >= layout.grid.rows:
            raise InputError("schedule rows", int(tiles[:, 6].max()), f"must be < the layout's {layout.grid.rows} rows")
        self.tiles_np = tiles
        self.tiles = torch.as_tensor(tiles, device=device)
        self.offsets = torch.as_tensor(offsets, device=device)
        self.num_programs = len(offsets) - 1
        self.l2_full = torch.zeros(max(layout.grid.rows, 1), dtype=torch.int32, device=device)
        self.error = torch.zeros(1, dtype=torch.int32, device=device)


def launch_moe(x_recv, w1, w2, act, dev: DeviceLayout, combine: Combine, *, block_k: int = 64,
               num_warps: int = 8, num_stages: int = 3, tma: bool = False, tile_log=None, write_count=None,
               spin_limit: int = SPIN_LIMIT) -> None:
    """Reset l2_full and run the persistent kernel over ``dev``'s schedule.

    ``x_recv`` [rows*BM, H] bf16 (receive layout), ``w1`` [E, 2I, H] packed by ``pack_w1``, ``w2`` [E, H, I], ``act``
    [rows*BM, I] scratch. ``tile_log``: int64 [T, 8] (GPU only). ``write_count``: int32
    [W, combine_rows, H/BN] incremented once per stored (row, N tile).
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
    if tile_log is not None and tuple(tile_log.shape) != (len(dev.tiles_np), len(TILE_LOG_FIELDS)):
        raise InputError("tile_log.shape", tuple(tile_log.shape), f"must be ({len(dev.tiles_np)}, 8)")
    if write_count is not None and tuple(write_count.shape) != (p.world_size, p.combine_rows, H // p.block_n):
        raise InputError("write_count.shape", tuple(write_count.shape), "must be (W, combine_rows, H/BN)")
    if interpreting() and spin_limit == SPIN_LIMIT:
        spin_limit = 64  # each poll is a Python call there
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        bm, bn = p.block_m, p.block_n
        x_recv = TensorDescriptor(x_recv, [rows, H], [H, 1], [bm, block_k])
        w1 = TensorDescriptor(w1, [E * 2 * I, H], [H, 1], [bn, block_k])
        w2 = TensorDescriptor(w2, [E * H, I], [I, 1], [bn, block_k])
    dev.l2_full.zero_()
    _moe_ffn_kernel[(dev.num_programs,)](
        x_recv, w1, w2, act, dev.tiles, dev.offsets, dev.l2_full, dev.error,
        dev.dest_rank, dev.dest_row, dev.weight, combine.table,
        write_count if write_count is not None else dev.error, tile_log if tile_log is not None else dev.error,
        H, I, p.combine_rows, spin_limit,
        BLOCK_M=p.block_m, BLOCK_N=p.block_n, BLOCK_K=block_k, INSTRUMENT=tile_log is not None,
        COUNT_WRITES=write_count is not None, DOT_F32=interpreting(), TMA=tma, num_warps=num_warps,
        num_stages=num_stages)


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


# --- Dispatch, references and baselines -----------------------------------------------------------
def dispatch(tokens, layout: DispatchLayout, out=None):
    """Dispatch's result on this GPU: gather source tokens ``[W * tokens_per_rank, H]`` into the receive
    layout ``[rows * BM, H]`` (padding rows zero). A separate step, not part of the fused kernel."""
    import torch

    if out is None:
        out = torch.zeros((layout.recv_rows, layout.problem.hidden), dtype=tokens.dtype, device=tokens.device)
    v = np.flatnonzero(layout.valid)
    idx = torch.as_tensor(layout.src_index[v], device=tokens.device)
    out[torch.as_tensor(v, device=tokens.device)] = tokens.index_select(0, idx)
    return out


def reference_moe(x_recv, w1, w2, layout: DispatchLayout):
    """float32 reference of the kernel's Combine rows, in receive order ``[rows*BM, H]`` (padding 0)."""
    import torch

    p = layout.problem
    out = torch.zeros((layout.recv_rows, p.hidden), dtype=torch.float32, device=x_recv.device)
    weight = torch.as_tensor(layout.weight, device=x_recv.device)
    for e, (c, first) in enumerate(zip(layout.tokens_per_expert, layout.grid.first_row)):
        if not c:
            continue
        s = slice(int(first) * p.block_m, int(first) * p.block_m + int(c))
        h = x_recv[s].float() @ w1[e].float().T
        act = torch.nn.functional.silu(h[:, :p.intermediate]) * h[:, p.intermediate:]
        out[s] = (act @ w2[e].float().T) * weight[s, None]
    return out


def compare(out, ref, rtol: float = 2e-2) -> dict:
    """Norm-wise relative error of ``out`` against ``ref`` and the worst element; ok when <= rtol."""
    import torch

    out, ref = out.float(), ref.float().to(out.device)
    finite = bool(torch.isfinite(out).all())
    rel = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)) if finite else float("inf")
    max_abs = float((out - ref).abs().max()) if finite and out.numel() else float("inf") if not finite else 0.0
    return {"rel_err": rel, "max_abs_err": max_abs, "ok": finite and rel <= rtol}


def pack_w1(w1):
    """The kernel's Linear-1 weight layout: [E, 2I, H] with gate row j at 2j and up row j at 2j + 1
    (from the usual [gate; up] = rows [0, I) and [I, 2I)). Done once per model, like any weight prepack."""
    E, two_i, H = w1.shape
    return w1.view(E, 2, two_i // 2, H).transpose(1, 2).reshape(E, two_i, H).contiguous()


def random_weights(problem, device, seed: int = 0, dtype=None):
    """Expert weights scaled so activations stay O(1): w1 [E, 2I, H], w2 [E, H, I]."""
    import torch

    dtype = dtype or torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(seed)
    p = problem
    w1 = torch.randn((p.local_experts, 2 * p.intermediate, p.hidden), device=device, generator=gen) / p.hidden ** 0.5
    w2 = torch.randn((p.local_experts, p.hidden, p.intermediate), device=device, generator=gen) / p.intermediate ** 0.5
    return w1.to(dtype).contiguous(), w2.to(dtype).contiguous()


def summarize_results(data_dir, platform=None) -> dict:
    """Summary of the committed MoE kernel records under ``data_dir/moe`` (see ``xstage.compare.moe_records``)."""
    from xstage.compare.moe_records import summarize

    return summarize(Path(data_dir), platform)
