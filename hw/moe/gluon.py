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
activations: the error flag says the run is invalid either way); no tile log and no write counter.
``gluon_args`` packs the launch (pure: no torch, no triton), ``launch_moe_gluon`` runs it. Importing this
module imports triton (3.6's Gluon API): callers import it inside functions. GPU only (Gluon has no
interpreter); the CPU compile for sm_90 is ``compile_sm90``.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                             warpgroup_mma_wait)

from xstage.errors import InputError
from xstage.hw.moe.buffers import SPIN_LIMIT, Combine, DeviceLayout
from xstage.hw.moe.gluon_args import GLUON_DEFAULTS, gluon_options


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
def _consumer(act_ptr, tiles_ptr, t_first, t_last, l2_full_ptr, dest_rank_ptr, dest_row_ptr, weight_ptr,
              dest_table_ptr, hidden, inter, a_bufs, w_bufs, ready, empty,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
              EARLY_ROWS: gl.constexpr, DIRECT: gl.constexpr, num_warps: gl.constexpr):
    """The default partition: the MMAs and both epilogues of every tile of this program. EARLY_ROWS: a Linear-2
    tile loads its rows' destinations and router weights before its mainloop (their latency hidden behind it)."""
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
        if kind == 0:
            acc, it = _mma_tile(hidden, a_bufs, w_bufs, ready, empty, it, acc_layout, BLOCK_M, BLOCK_N, BLOCK_K,
                                STAGES)
            _swiglu_out(acc, act_ptr, l2_full_ptr, row, n_block, inter, BLOCK_M, BLOCK_N, num_warps)
        else:
            if EARLY_ROWS:
                wt, row_ptr, valid = _combine_rows(row, n_block, hidden, dest_rank_ptr, dest_row_ptr, weight_ptr,
                                                   dest_table_ptr, out_ty, acc_layout, st_layout, BLOCK_M, BLOCK_N)
            acc, it = _mma_tile(inter, a_bufs, w_bufs, ready, empty, it, acc_layout, BLOCK_M, BLOCK_N, BLOCK_K,
                                STAGES)
            if not EARLY_ROWS:
                wt, row_ptr, valid = _combine_rows(row, n_block, hidden, dest_rank_ptr, dest_row_ptr, weight_ptr,
                                                   dest_table_ptr, out_ty, acc_layout, st_layout, BLOCK_M, BLOCK_N)
            _combine_store(acc, wt, row_ptr, valid, out_ty, st_layout, BLOCK_N, DIRECT)


@gluon.jit(do_not_specialize=["spin_limit"])
def _moe_ffn_gluon(x_desc, w1_desc, act_desc, w2_desc, act_ptr, tiles_ptr, offsets_ptr, l2_full_ptr, error_ptr,
                   dest_rank_ptr, dest_row_ptr, weight_ptr, dest_table_ptr, hidden, inter, spin_limit,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
                   LOADER_REGS: gl.constexpr, EARLY_ROWS: gl.constexpr, DIRECT: gl.constexpr,
                   num_warps: gl.constexpr):
    """x / act descriptors over [rows*BM, H] / [rows*BM, I] (blocks [BM, BK]); w1 / w2 over [E*2I, H] /
    [E*H, I] (blocks [BN, BK]), w1 packed by ``refs.pack_w1``."""
    pid = gl.program_id(0)
    t_first = gl.load(offsets_ptr + pid)
    t_last = gl.load(offsets_ptr + pid + 1)
    a_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    w_bufs = gl.allocate_shared_memory(w1_desc.dtype, [STAGES] + w1_desc.block_type.shape, w1_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (act_ptr, tiles_ptr, t_first, t_last, l2_full_ptr, dest_rank_ptr, dest_row_ptr, weight_ptr,
                     dest_table_ptr, hidden, inter, a_bufs, w_bufs, ready, empty,
                     BLOCK_M, BLOCK_N, BLOCK_K, STAGES, EARLY_ROWS, DIRECT, num_warps)),
        (_loader, (x_desc, w1_desc, act_desc, w2_desc, tiles_ptr, t_first, t_last, l2_full_ptr, error_ptr,
                   spin_limit, hidden, inter, a_bufs, w_bufs, ready, empty, BLOCK_M, BLOCK_N, BLOCK_K, STAGES)),
    ], [1], [LOADER_REGS])


def descriptors(x_recv, w1_packed, act, w2, block_m: int, block_n: int, block_k: int) -> tuple:
    """Host TMA descriptors (x, w1, act, w2) of the kernel's four operands (bf16, NVMMA-swizzled blocks)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    a_layout = gl.NVMMASharedLayout.get_default_for([block_m, block_k], gl.bfloat16)
    w_layout = gl.NVMMASharedLayout.get_default_for([block_n, block_k], gl.bfloat16)
    E2I, H = w1_packed.shape[-2:]
    EH, I = w2.shape[0] * w2.shape[1], w2.shape[2]
    return (TensorDescriptor(x_recv, list(x_recv.shape), [H, 1], [block_m, block_k], a_layout),
            TensorDescriptor(w1_packed.view(-1, H), [w1_packed.shape[0] * E2I, H], [H, 1], [block_n, block_k],
                             w_layout),
            TensorDescriptor(act, list(act.shape), [I, 1], [block_m, block_k], a_layout),
            TensorDescriptor(w2.view(-1, I), [EH, I], [I, 1], [block_n, block_k], w_layout))


_resident: dict = {}


def check_resident_gluon(args: tuple, opts: dict, programs: int) -> dict:
    """Compile the launch (no run) and raise ``InputError`` unless all ``programs`` CTAs fit at once (the loader
    warp's partition counts: the compiled kernel's warps, not ``num_warps``)."""
    from xstage.hw.moe.residency import compiled_resources, device_limits, resident_per_sm

    key = (programs, tuple(sorted(opts.items())))
    if key not in _resident:
        compiled = _moe_ffn_gluon.warmup(*args, grid=(programs,), **opts)
        n_regs, shared = compiled_resources(compiled)
        sms, limits = device_limits()
        per_sm = resident_per_sm(n_regs, shared, int(compiled.metadata.num_warps), limits)
        _resident[key] = {"n_regs": n_regs, "shared_bytes": shared, "warps": int(compiled.metadata.num_warps),
                          "per_sm": per_sm, "resident": per_sm * sms}
    got = _resident[key]
    if programs > got["resident"]:
        raise InputError("programs", programs, f"must be <= {got['resident']} resident at once ({got})")
    return got


def launch_moe_gluon(x_recv, w1_packed, w2, act, dev: DeviceLayout, combine: Combine, *,
                     spin_limit: int = SPIN_LIMIT, **options) -> dict:
    """Reset ``l2_full`` and run the Gluon kernel over ``dev``'s schedule into ``combine``; the same operands as
    ``kernel.launch_moe`` (x_recv [rows*BM, H], w1 packed [E, 2I, H], w2 [E, H, I], act [rows*BM, I], bf16).
    ``options``: ``gluon_args.GLUON_DEFAULTS`` keys. Returns the residency record of the compiled launch."""
    import torch

    p = dev.layout.problem
    H, I, E, rows = p.hidden, p.intermediate, p.local_experts, dev.layout.recv_rows
    for name, t, shape in (("x_recv", x_recv, (rows, H)), ("w1", w1_packed, (E, 2 * I, H)), ("w2", w2, (E, H, I)),
                           ("act", act, (rows, I))):
        if tuple(t.shape) != shape or not t.is_contiguous() or t.dtype != torch.bfloat16:
            raise InputError(name, (tuple(t.shape), str(t.dtype)), f"must be a contiguous bf16 {shape} tensor")
    if H % 8 or any(ptr % 16 for ptr in combine.pointers):
        raise InputError("hidden/combine buffers", H, "must be a multiple of 8 / 16-byte aligned")
    o = gluon_options(options, H, I, p.block_m, p.block_n)
    args = (*descriptors(x_recv, w1_packed, act, w2, p.block_m, p.block_n, o["block_k"]), act, dev.tiles,
            dev.offsets, dev.l2_full, dev.error, dev.dest_rank, dev.dest_row, dev.weight, combine.table, H, I,
            int(spin_limit))
    opts = dict(BLOCK_M=p.block_m, BLOCK_N=p.block_n, BLOCK_K=o["block_k"], STAGES=o["stages"],
                LOADER_REGS=o["loader_regs"], EARLY_ROWS=bool(o["early_rows"]), DIRECT=bool(o["direct_store"]),
                num_warps=o["num_warps"], maxnreg=o["maxnreg"])
    got = check_resident_gluon(args, opts, dev.num_programs)
    dev.l2_full.zero_()
    _moe_ffn_gluon[(dev.num_programs,)](*args, **opts)
    return got
