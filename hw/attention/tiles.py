"""The tile pieces of the fused FlashAttention kernel (``kernel.py``), each a ``@triton.jit`` function
inlined into ``_fa_fwd_kernel``: the work order with the own chunk last (``_local_last``), the K/V steps of
one Q tile (``_kv_steps``, ``_q_loop``: online softmax, with DRIP / STAGGER sends between steps), the
epilogue (``_store_tile``: normalise and store, or stage for a later send; ``_merge_store``: merge the
K/V parts of a split tile) and the remote sends (``_send_chunk``, ``_send_tile``).

Importing this module imports triton: callers import the kernels inside functions.
"""

import triton
import triton.language as tl

from xstage.hw.common.ptx import _globaltimer


@triton.jit
def _local_last(work, m_blocks, nb_local, rank, heads):
    """(head, m_block) of work item ``work`` when the tiles of the sender's own chunk come last.

    Remote tiles first (head-major, m-blocks ascending, skipping the own chunk), then the own chunk's:
    the last wave, whose stores drain after the compute ends, then carries less remote data.
    """
    remote_per_head = m_blocks - nb_local
    n_remote = heads * remote_per_head
    is_local = work >= n_remote
    rph = tl.maximum(remote_per_head, 1)
    r = work % rph
    mb_remote = r + tl.where(r >= rank * nb_local, nb_local, 0)
    l_idx = tl.maximum(work - n_remote, 0)
    head = tl.where(is_local, l_idx // nb_local, work // rph)
    m_block = tl.where(is_local, rank * nb_local + l_idx % nb_local, mb_remote)
    return head, m_block


@triton.jit
def _send_chunk(stage, dest, chunk, stride_dm, HEAD_DIM: tl.constexpr, CHUNK_ROWS: tl.constexpr,
                STORE_CACHE: tl.constexpr):
    """Store rows [chunk*CHUNK_ROWS, +CHUNK_ROWS) of the staged tile to its destination (16-byte stores)."""
    rows = chunk * CHUNK_ROWS + tl.arange(0, CHUNK_ROWS)
    offs_d = tl.arange(0, HEAD_DIM)
    part = tl.load(stage + rows[:, None] * HEAD_DIM + offs_d[None, :])
    tl.store(tl.multiple_of(dest, 16) + rows[:, None] * stride_dm + offs_d[None, :], part, cache_modifier=STORE_CACHE)


@triton.jit
def _merge_store(part, target, target_stride, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, CHUNK_ROWS: tl.constexpr,
                 PARTS: tl.constexpr, CACHE: tl.constexpr):
    """Merge the PARTS K/V parts' partials (acc, m, l) saved at ``part`` and store the normalised tile
    to ``target`` (row stride ``target_stride``), CHUNK_ROWS rows at a time: the partials come from
    memory, so no second accumulator lives in registers, and the parts are unrolled, so each chunk's
    loads of every part are in flight together (one memory round trip per chunk, not per part)."""
    offs_d = tl.arange(0, HEAD_DIM)
    size: tl.constexpr = BLOCK_M * (HEAD_DIM + 2)
    for c in tl.static_range(BLOCK_M // CHUNK_ROWS):
        rows = c * CHUNK_ROWS + tl.arange(0, CHUNK_ROWS)
        m = tl.load(part + BLOCK_M * HEAD_DIM + rows, cache_modifier=".cg")
        for k in tl.static_range(1, PARTS):
            m = tl.maximum(m, tl.load(part + k * size + BLOCK_M * HEAD_DIM + rows, cache_modifier=".cg"))
        o = tl.zeros([CHUNK_ROWS, HEAD_DIM], dtype=tl.float32)
        l = tl.zeros([CHUNK_ROWS], dtype=tl.float32)
        for k in tl.static_range(PARTS):
            w_k = tl.math.exp2(tl.load(part + k * size + BLOCK_M * HEAD_DIM + rows, cache_modifier=".cg") - m)
            o += tl.load(part + k * size + rows[:, None] * HEAD_DIM + offs_d[None, :], cache_modifier=".cg") * w_k[:, None]
            l += tl.load(part + k * size + BLOCK_M * (HEAD_DIM + 1) + rows, cache_modifier=".cg") * w_k
        tl.store(target + rows[:, None] * target_stride + offs_d[None, :], (o / l[:, None]).to(target.dtype.element_ty),
                 cache_modifier=CACHE)


@triton.jit
def _store_tile(acc, l_i, target, target_stride, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, STAGED: tl.constexpr,
                CACHE: tl.constexpr):
    """Store the normalised tile ``acc / l`` to ``target`` (row stride ``target_stride``). STAGED: the
    target is the program's staging slot, whose previous tile every thread must have read first."""
    rows = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    if STAGED:
        tl.debug_barrier()
    tl.store(tl.multiple_of(target, 16) + rows[:, None] * target_stride + offs_d[None, :],
             (acc / l_i[:, None]).to(target.dtype.element_ty), cache_modifier=CACHE)


@triton.jit
def _send_tile(stage, dest, stride_dm, log_row, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr,
               STORE_CACHE: tl.constexpr, INSTRUMENT: tl.constexpr):
    """Store the whole staged tile to its destination: one load and one store of the tile, so every
    thread's loads are in flight together (a loop of chunks would wait for each chunk's load).
    INSTRUMENT: %globaltimer around the remote stores into the tile's log row (issue start, end)."""
    rows = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    tile = tl.load(stage + rows[:, None] * HEAD_DIM + offs_d[None, :])
    if INSTRUMENT:
        t0 = _globaltimer()
    tl.store(tl.multiple_of(dest, 16) + rows[:, None] * stride_dm + offs_d[None, :], tile, cache_modifier=STORE_CACHE)
    if INSTRUMENT:
        t1 = _globaltimer()
        tl.store(log_row + 5, t0)
        tl.store(log_row + 6, t1)


@triton.jit
def _kv_steps(q, k_ptr, v_ptr, head, start, end, acc, m_i, l_i, stride_km, stride_kh, stride_vm, stride_vh, qk_scale,
              stage, pend_ptr, pend_chunks, drip_stride, drip_origin, stride_dm,
              HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr, TMA: tl.constexpr,
              STORE_CACHE: tl.constexpr, DRIP: tl.constexpr, CHUNK_ROWS: tl.constexpr):
    """FlashAttention steps over K/V rows [start, end), continuing the online softmax (acc, m, l).

    DRIP: one chunk of the staged previous tile every ``drip_stride`` steps counted from
    ``drip_origin``, while chunks remain; the send sits behind a scalar branch.
    """
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    if not TMA:
        k_tile = k_ptr + head * stride_kh + offs_n[:, None] * stride_km + offs_d[None, :]
        v_tile = v_ptr + head * stride_vh + offs_n[:, None] * stride_vm + offs_d[None, :]
    for start_n in range(start, end, BLOCK_N):
        if TMA:
            k = k_ptr.load([start_n, head * HEAD_DIM])
        else:
            k = tl.load(k_tile + start_n * stride_km)
        if DOT_F32:  # the Triton interpreter multiplies bf16 as raw integers: upcast there
            qk = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)))
        else:
            qk = tl.dot(q, tl.trans(k))
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if TMA:
            v = v_ptr.load([start_n, head * HEAD_DIM])
        else:
            v = tl.load(v_tile + start_n * stride_vm)
        if DOT_F32:
            acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc)
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
        if DRIP:
            step = (start_n - drip_origin) // BLOCK_N
            if (step % drip_stride == 0) & (step // drip_stride < pend_chunks):
                _send_chunk(stage, pend_ptr, step // drip_stride, stride_dm, HEAD_DIM, CHUNK_ROWS, STORE_CACHE)
    return acc, m_i, l_i


@triton.jit
def _q_loop(q, k_ptr, v_ptr, head, kv_start, kv_end, stride_km, stride_kh, stride_vm, stride_vh, qk_scale,
            stage, pend_ptr, pend_chunks, pend_wait, stride_dm, send_due, pend_log,
            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr,
            TMA: tl.constexpr, STORE_CACHE: tl.constexpr, DRIP: tl.constexpr, STAGGER: tl.constexpr,
            CHUNK_ROWS: tl.constexpr, INSTRUMENT: tl.constexpr):
    """Online-softmax attention of the Q tile ``q`` over K/V rows [kv_start, kv_end): (acc, m, l),
    unnormalised, and the staged tile's state (chunks still to send, K/V steps run since it was staged).

    The staged previous tile (``pend_chunks`` chunks; DRIP / STAGGER) goes out during this loop:
    DRIP: one chunk every few K/V steps, all in the loop's first half.
    STAGGER: whole, once the program has run ``send_due`` K/V steps since staging it (``pend_wait``
    before this loop; the due step depends on the program), between two plain FlashAttention loops:
    the programs' sends spread over half a whole Q-loop of time, even when the loops are K/V parts
    of a split tile, and no step carries send code. Not yet due at the loop's end: it stays pending.
    """
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    n_steps = (kv_end - kv_start) // BLOCK_N
    drip_stride = tl.maximum(n_steps // (2 * tl.maximum(pend_chunks, 1)), 1)
    if STAGGER:
        wait = send_due - pend_wait  # steps of this loop before the send
        k_send = kv_start + tl.minimum(tl.maximum(wait, 0), n_steps) * BLOCK_N
        acc, m_i, l_i = _kv_steps(q, k_ptr, v_ptr, head, kv_start, k_send, acc, m_i, l_i, stride_km, stride_kh,
                                  stride_vm, stride_vh, qk_scale, stage, pend_ptr, pend_chunks, drip_stride, kv_start,
                                  stride_dm, HEAD_DIM, BLOCK_N, DOT_F32, TMA, STORE_CACHE, False, CHUNK_ROWS)
        if (pend_chunks > 0) & (wait < n_steps):
            _send_tile(stage, pend_ptr, stride_dm, pend_log, BLOCK_M, HEAD_DIM, STORE_CACHE, INSTRUMENT)
            pend_chunks = pend_chunks * 0
        acc, m_i, l_i = _kv_steps(q, k_ptr, v_ptr, head, k_send, kv_end, acc, m_i, l_i, stride_km, stride_kh,
                                  stride_vm, stride_vh, qk_scale, stage, pend_ptr, pend_chunks, drip_stride, kv_start,
                                  stride_dm, HEAD_DIM, BLOCK_N, DOT_F32, TMA, STORE_CACHE, False, CHUNK_ROWS)
    else:
        acc, m_i, l_i = _kv_steps(q, k_ptr, v_ptr, head, kv_start, kv_end, acc, m_i, l_i, stride_km, stride_kh,
                                  stride_vm, stride_vh, qk_scale, stage, pend_ptr, pend_chunks, drip_stride, kv_start,
                                  stride_dm, HEAD_DIM, BLOCK_N, DOT_F32, TMA, STORE_CACHE, DRIP, CHUNK_ROWS)
        pend_chunks = pend_chunks * 0  # DRIP sent every chunk of the staged tile
    return acc, m_i, l_i, pend_chunks, pend_wait + n_steps
