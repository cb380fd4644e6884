"""W8A8 variant of the fused MoE FFN: fp8 e4m3 weights and activations, float32 scales, bf16 Combine rows.

Same persistent walk, l2_full protocol, Combine epilogue and instrumentation as ``xstage.hw.moe.kernel``
(read that first); only the arithmetic differs:

- Dispatch output ``x_q`` fp8 with one scale per token row (``sx``, amax / 448).
- W1 packed as in ``moe.pack_w1`` and W2, fp8 with one scale per output channel (``sw1 [E, 2I]`` in
  packed order, ``sw2 [E, H]``).
- L1 tile: ``acc = x_q w1_q^T`` (fp8 MMA, fp32 accumulate) times ``sx[row] sw1[col]``; SwiGLU; the
  BN/2 activation columns of each row are re-quantized to fp8 with one scale per (row, L1 tile)
  (``sact [rows*BM, 2I/BN]``: 1 x BN/2 blocks, since a row's other columns live in other tiles).
- L2 tile: K steps of exactly BN/2 (one activation scale block each): ``acc += (a_q w2_q^T) sact``;
  the epilogue multiplies by ``sw2[col]`` and the router weight and stores bf16.

The tile pieces (walk, wait, release, Combine epilogue, log) are ``tiles.py``'s, as in the bf16 kernel.
``refs.reference_w8a8`` computes the same quantized math in float32 (from the dequantized fp8 values,
with its own activation re-quantization).
"""


import triton
import triton.language as tl

from xstage.errors import InputError
from xstage.hw.moe.buffers import SPIN_LIMIT, DeviceLayout, check_logs
from xstage.hw.moe.kernel import interpreting
from xstage.hw.moe.residency import check_resident
from xstage.hw.moe.refs import (FP8_MAX, W8A8Weights, quantize_activations, quantize_rows,  # noqa: F401 - re-exported
                                reference_w8a8)
from xstage.hw.moe.tiles import (_act_fence, _combine_dst, _combine_rows, _count_writes, _log_tile, _mainloop_tma,
                                 _no_stamps, _program_span, _release_row, _stamp, _tile_fields, _tile_wait)


@triton.jit
def _round_e4m3(v):
    """v on the e4m3 grid (round half away from zero, saturating at 448). Used only under the
    interpreter, whose fp32 -> fp8 cast drops the carry when the mantissa rounds up (31.7 -> 16)."""
    a = tl.abs(v)
    e = tl.maximum(tl.floor(tl.log2(tl.maximum(a, 1e-30))), -6.0)
    ulp = tl.exp2(e - 3.0)
    r = tl.minimum(tl.floor(a / ulp + 0.5) * ulp, 448.0)
    return tl.where(v < 0, -r, r)


@triton.jit(do_not_specialize=["combine_rows", "spin_limit"])
def _moe_ffn_w8a8_kernel(x_ptr, sx_ptr, w1_ptr, sw1_ptr, w2_ptr, sw2_ptr, act_ptr, act_desc, sact_ptr,
                         tiles_ptr, offsets_ptr, l2_full_ptr, error_ptr,
                         dest_rank_ptr, dest_row_ptr, weight_ptr, dest_table_ptr, count_ptr, log_ptr,
                         hidden, inter, combine_rows, spin_limit,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         INSTRUMENT: tl.constexpr, COUNT_WRITES: tl.constexpr, DOT_F32: tl.constexpr,
                         TMA: tl.constexpr, ACT_TMA: tl.constexpr, WS: tl.constexpr):
    """TMA: x_ptr, w1_ptr, w2_ptr are tensor descriptors over [rows*BM, H], [E*2I, H], [E*H, I] (blocks
    [BM, BK], [BN, BK], [BN, BN/2]); ACT_TMA: act_desc one over act_q (blocks [BM, BN/2])."""
    HALF: tl.constexpr = BLOCK_N // 2
    pid, t_first, t_last = _program_span(offsets_ptr)
    offs_k = tl.arange(0, BLOCK_K)
    offs_h = tl.arange(0, HALF)
    offs_n = tl.arange(0, BLOCK_N)
    act_blocks = inter // HALF
    for i in range(t_first, t_last):
        kind, expert32, expert, n_block, row, need, offs_m = _tile_fields(tiles_ptr, i, BLOCK_M)
        run, t_wait, t_ml0 = _tile_wait(kind, l2_full_ptr, row, need, spin_limit, error_ptr, INSTRUMENT)
        t_ml1, t_is0, t_is1 = _no_stamps()
        if (run == 1) & (kind == 0):
            cols = n_block * BLOCK_N + offs_n
            if TMA:
                acc = _mainloop_tma(x_ptr, w1_ptr, row * BLOCK_M, expert32 * (2 * inter) + n_block * BLOCK_N, hidden,
                                    BLOCK_M, BLOCK_N, BLOCK_K, DOT_F32, WS)
            else:
                a_ptrs = x_ptr + offs_m[:, None] * hidden + offs_k[None, :]
                w_ptrs = w1_ptr + expert * (2 * inter * hidden) + cols[None, :].to(tl.int64) * hidden + offs_k[:, None]
                acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for _k in range(0, hidden, BLOCK_K):
                    a = tl.load(a_ptrs)
                    w = tl.load(w_ptrs)
                    if DOT_F32:
                        acc += tl.dot(a.to(tl.float32), w.to(tl.float32))
                    else:
                        acc = tl.dot(a, w, acc)
                    a_ptrs += BLOCK_K
                    w_ptrs += BLOCK_K
            t_ml1 = _stamp(INSTRUMENT)
            sx = tl.load(sx_ptr + offs_m)
            sw = tl.load(sw1_ptr + expert * (2 * inter) + cols)
            acc = acc * sx[:, None] * sw[None, :]
            gate, up = tl.split(tl.reshape(acc, [BLOCK_M, HALF, 2]))
            h = gate * tl.sigmoid(gate) * up
            s = tl.maximum(tl.max(tl.abs(h), axis=1), 1e-12) / 448.0
            q = h / s[:, None]
            if DOT_F32:
                q = _round_e4m3(q)
            q = q.to(act_ptr.dtype.element_ty)
            t_is0 = _stamp(INSTRUMENT)
            tl.store(act_ptr + offs_m[:, None] * inter + (n_block * HALF + offs_h)[None, :], q)
            tl.store(sact_ptr + offs_m * act_blocks + n_block, s)
            _release_row(l2_full_ptr, row)
            t_is1 = _stamp(INSTRUMENT)
        if (run == 1) & (kind == 1):
            a_ptrs = act_ptr + offs_m[:, None] * inter + offs_h[None, :]
            cols = n_block * BLOCK_N + offs_n
            acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            if TMA:
                _act_fence(ACT_TMA, DOT_F32)
                for kb in tl.range(0, act_blocks, warp_specialize=WS):
                    if ACT_TMA:
                        a = act_desc.load([row * BLOCK_M, kb * HALF])
                    else:
                        a = tl.load(a_ptrs + kb * HALF, cache_modifier=".cg")
                    w = tl.trans(w2_ptr.load([expert32 * hidden + n_block * BLOCK_N, kb * HALF]))
                    sa = tl.load(sact_ptr + offs_m * act_blocks + kb, cache_modifier=".cg")
                    if DOT_F32:
                        a, w = a.to(tl.float32), w.to(tl.float32)
                    acc += tl.dot(a, w) * sa[:, None]
            else:
                w_ptrs = w2_ptr + expert * (hidden * inter) + cols[None, :].to(tl.int64) * inter + offs_h[:, None]
                for kb in range(0, act_blocks):
                    a = tl.load(a_ptrs, cache_modifier=".cg")
                    w = tl.load(w_ptrs)
                    sa = tl.load(sact_ptr + offs_m * act_blocks + kb, cache_modifier=".cg")
                    if DOT_F32:
                        part = tl.dot(a.to(tl.float32), w.to(tl.float32))
                    else:
                        part = tl.dot(a, w)
                    acc += part * sa[:, None]
                    a_ptrs += HALF
                    w_ptrs += HALF
            t_ml1 = _stamp(INSTRUMENT)
            d_rank, d_row, wt, valid, base = _combine_rows(dest_rank_ptr, dest_row_ptr, weight_ptr, dest_table_ptr,
                                                           offs_m, tl.bfloat16)
            sw = tl.load(sw2_ptr + expert * hidden + cols)
            out = (acc * sw[None, :] * wt[:, None]).to(tl.bfloat16)
            dst = _combine_dst(base, d_row, cols, hidden, BLOCK_N)
            t_is0 = _stamp(INSTRUMENT)
            tl.store(dst, out, mask=valid[:, None])
            t_is1 = _stamp(INSTRUMENT)
            if COUNT_WRITES:
                _count_writes(count_ptr, valid, d_rank, d_row, n_block, combine_rows, hidden // BLOCK_N, BLOCK_M)
        if INSTRUMENT:
            _log_tile(log_ptr, i, pid, t_first, t_wait, t_ml0, t_ml1, t_is0, t_is1)


def launch_moe_w8a8(x_q, sx, weights: W8A8Weights, act_q, sact, dev: DeviceLayout, combine, *, block_k: int = 128,
                    num_warps: int = 8, num_stages: int = 3, tma: bool = False, act_tma: bool = False,
                    ws: bool = False, tile_log=None, write_count=None, spin_limit: int = SPIN_LIMIT) -> None:
    """Reset l2_full and run the W8A8 kernel. ``act_q`` fp8 [rows*BM, I], ``sact`` float32 [rows*BM, 2I/BN];
    ``tma``, ``act_tma``, ``ws`` as in ``kernel.launch_moe``."""
    import torch

    p = dev.layout.problem
    H, I, E, rows = p.hidden, p.intermediate, p.local_experts, dev.layout.recv_rows
    fp8 = torch.float8_e4m3fn
    for name, t, shape, dtype in (("x_q", x_q, (rows, H), fp8), ("sx", sx, (rows,), torch.float32),
                                  ("w1_q", weights.w1_q, (E, 2 * I, H), fp8), ("sw1", weights.sw1, (E, 2 * I),
                                                                               torch.float32),
                                  ("w2_q", weights.w2_q, (E, H, I), fp8), ("sw2", weights.sw2, (E, H), torch.float32),
                                  ("act_q", act_q, (rows, I), fp8), ("sact", sact, (rows, 2 * I // p.block_n),
                                                                     torch.float32)):
        if tuple(t.shape) != shape or t.dtype != dtype or not t.is_contiguous():
            raise InputError(name, (tuple(t.shape), str(t.dtype)), f"must be a contiguous {shape} {dtype} tensor")
    if p.precision != "w8a8":
        raise InputError("problem.precision", p.precision, "must be w8a8 for this kernel")
    if H % block_k or H % 8 or any(ptr % 16 for ptr in combine.pointers):
        raise InputError("block_k", block_k, f"must divide hidden={H} (and hidden % 8 == 0, 16-byte aligned buffers)")
    if act_tma and not tma:
        raise InputError("act_tma", act_tma, "needs tma=True (the weights through descriptors too)")
    spin_limit = check_logs(dev, tile_log, write_count, spin_limit, interpreting())
    w1, w2, x, act_desc = weights.w1_q, weights.w2_q, x_q, act_q
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        bm, bn = p.block_m, p.block_n
        x = TensorDescriptor(x_q, [rows, H], [H, 1], [bm, block_k])
        w1 = TensorDescriptor(w1, [E * 2 * I, H], [H, 1], [bn, block_k])
        w2 = TensorDescriptor(w2, [E * H, I], [I, 1], [bn, bn // 2])
        if act_tma:
            act_desc = TensorDescriptor(act_q, [rows, I], [I, 1], [bm, bn // 2])
    args = (x, sx, w1, weights.sw1, w2, weights.sw2, act_q, act_desc, sact, dev.tiles, dev.offsets,
            dev.l2_full, dev.error, dev.dest_rank, dev.dest_row, dev.weight, combine.table,
            write_count if write_count is not None else dev.error, tile_log if tile_log is not None else dev.error,
            H, I, p.combine_rows, spin_limit)
    opts = dict(BLOCK_M=p.block_m, BLOCK_N=p.block_n, BLOCK_K=block_k, INSTRUMENT=tile_log is not None,
                COUNT_WRITES=write_count is not None, DOT_F32=interpreting(), TMA=tma, ACT_TMA=act_tma, WS=ws,
                num_warps=num_warps, num_stages=num_stages)
    if not interpreting():   # as the bf16 launcher: more programs than SMs only if all are resident
        check_resident(_moe_ffn_w8a8_kernel, args, opts, dev.num_programs)
    dev.l2_full.zero_()
    _moe_ffn_w8a8_kernel[(dev.num_programs,)](*args, **opts)
