"""Host side of the flattened bf16 kernel (``flat.py``): K chunks, its step arrays and weight layout; numpy / torch.

The flattened kernel runs one loop over (tile, K chunk) steps with a K loop of fixed length ``C`` inside, so
Triton's loop fusion (``tl.range(..., flatten=True)``) can make it one software-pipelined loop: the TMA loads
of the next step's first K blocks are issued while this step's last MMAs and its epilogue run. A Linear-1 tile
(K = H) is H / C steps and a Linear-2 tile (K = I) I / C steps, ``C = chunk_k(H, I)``; each program's tiles and
their order are the schedule's (``Schedule.to_arrays()``), each tile cut into its chunks in K order.

The pipeline issues a step's loads before the previous step's epilogue, so a Linear-2 tile's wait for its row
(and the acquire that orders its activation loads) runs before the previous tile of the same program releases
its row. Where that could make programs wait on each other in a cycle, ``flat_breaks`` cuts the program's list
into pipelined segments (the pipeline drains between them, as in ``kernel.py`` after every tile).
"""

import math

import numpy as np

from xstage.errors import InputError


def chunk_k(hidden: int, intermediate: int, block_k: int) -> int:
    """The K chunk both GEMMs are cut into: gcd(H, I), which must be a multiple of ``block_k``."""
    c = math.gcd(int(hidden), int(intermediate))
    if c % block_k:
        raise InputError("block_k", block_k, f"must divide gcd(hidden, intermediate) = {c} (the flattened K chunk)")
    return c


def step_arrays(tiles: np.ndarray, offsets: np.ndarray, hidden: int, intermediate: int, chunk: int) -> tuple:
    """(steps int32 [S, 2]: tile index, chunk; step offsets int32 [P + 1]) of a schedule's tile arrays:
    program p's steps are its tiles in order, each cut into its K chunks (H / C for kind 0, I / C for kind 1)."""
    tiles = np.asarray(tiles)
    offsets = np.asarray(offsets, dtype=np.int64)
    n_chunks = np.where(tiles[:, 0] == 0, hidden // chunk, intermediate // chunk).astype(np.int64)
    tile_idx = np.repeat(np.arange(len(tiles), dtype=np.int64), n_chunks)
    first = np.concatenate([[0], np.cumsum(n_chunks)])
    chunk_idx = np.arange(len(tile_idx), dtype=np.int64) - np.repeat(first[:-1], n_chunks)
    steps = np.stack([tile_idx, chunk_idx], axis=1).astype(np.int32)
    return np.ascontiguousarray(steps), first[offsets].astype(np.int32)


def flat_breaks(tiles: np.ndarray, offsets: np.ndarray, rows: int) -> np.ndarray:
    """bool [T]: tile t starts a new pipelined segment (the pipeline drains before it, as in ``kernel.py``).

    Inside a segment the pipeline issues a tile's loads, and a Linear-2 tile's wait for its row, before the
    previous tile's epilogue, so a program may end tile t only once tile t + 1's row is ready unless t + 1 starts
    a segment. Both conditions only grow (rows' Linear-1 counts), so running every program as far as it can until
    none moves ends all of them exactly when no execution can deadlock; where programs stop, a break is put before
    the tile each waits on and the run goes on. Every program's first tile starts a segment; a schedule that
    deadlocks by itself (a Linear-2 tile before its row's Linear-1 tiles) gets a segment per tile, the per-tile
    kernel's order, whose bounded spin then sets the error flag."""
    tiles = np.asarray(tiles)
    offsets = np.asarray(offsets, dtype=np.int64)
    kind, row, need = tiles[:, 0], tiles[:, 6].astype(np.int64), tiles[:, 7].astype(np.int64)
    breaks = np.zeros(len(tiles), dtype=bool)
    breaks[offsets[:-1][offsets[:-1] < offsets[1:]]] = True
    done = np.zeros(max(int(rows), 1), dtype=np.int64)
    pos = offsets[:-1].copy()
    ends = offsets[1:]

    def ready(t: int, end: int) -> bool:
        return t >= end or kind[t] == 0 or done[row[t]] >= need[t]

    while True:
        moved = True
        while moved:
            moved = False
            for p in range(len(pos)):
                t, end = int(pos[p]), int(ends[p])
                while t < end and ready(t, end) and (t + 1 >= end or breaks[t + 1] or ready(t + 1, end)):
                    if kind[t] == 0:
                        done[row[t]] += 1
                    t += 1
                    moved = True
                pos[p] = t
        stuck = [int(pos[p]) + 1 for p in range(len(pos)) if pos[p] < ends[p] and ready(int(pos[p]), int(ends[p]))]
        if not stuck:
            break
        breaks[stuck] = True
    if np.any(pos < ends):   # the schedule deadlocks as it is: per-tile segments, the bounded spin reports it
        breaks[:] = True
    return breaks


def segment_arrays(breaks: np.ndarray, step_off: np.ndarray, steps: np.ndarray) -> tuple:
    """(segment starts int32 [G + 1] in step index, segment offsets int32 [P + 1]) of the tile breaks."""
    starts_tile = np.flatnonzero(breaks)
    first_step = np.searchsorted(steps[:, 0], starts_tile, side="left")   # steps are tile-sorted
    seg_start = np.concatenate([first_step, [len(steps)]]).astype(np.int32)
    seg_off = np.searchsorted(first_step, step_off, side="left").astype(np.int32)
    return seg_start, seg_off


def chunked_weights(w1_packed, w2, chunk: int):
    """Both weight matrices as one ``[(H / C) * E * 2I + (I / C) * E * H, C]`` tensor, K chunk by K chunk: chunk
    c of W1 (packed by ``pack_w1``, [E, 2I, H]) is rows ``c * E * 2I + e * 2I + n``, chunk c of W2 ([E, H, I])
    rows ``(H / C) * E * 2I + c * E * H + e * H + n``; each row holds that chunk's C columns (a one-time repack)."""
    import torch

    E, two_i, H = w1_packed.shape
    I = w2.shape[2]
    a = w1_packed.reshape(E * two_i, H // chunk, chunk).permute(1, 0, 2).reshape(-1, chunk)
    b = w2.reshape(E * H, I // chunk, chunk).permute(1, 0, 2).reshape(-1, chunk)
    return torch.cat([a, b]).contiguous()


def side_by_side(x_recv, intermediate: int):
    """(xa [rows, H + I], act view [rows, I]): the received tokens and the activations in one row-major buffer
    (x in columns [0, H), act in [H, H + I)), so one tensor descriptor reads both GEMMs' A operand."""
    import torch

    rows, H = x_recv.shape
    xa = torch.empty((rows, H + intermediate), dtype=x_recv.dtype, device=x_recv.device)
    xa[:, :H] = x_recv
    return xa, xa[:, H:]
