"""Which schedule programs share an SM when several run per SM (issue 17, short K at two programs per SM).

A schedule built for P x SMs programs (``make_moe_schedule(..., 2 * 132)``) hands its programs uneven work:
Algorithm 1's cursors stride over the pairs, so the first pairs take one more Linear-1 *and* one more Linear-2
tile than the last (DiT-MoE-S: 5, 4 or 3 tiles a program). Which two programs meet on an SM is up to the
hardware's CTA dispatch (in the committed tile logs program i and i + 132 shared an SM only 56 % of the
time), so an SM held up to 9 tiles where the mean is 7.6, and the makespan followed the fullest SMs.

``balanced_placement`` keeps every program's tile order (the simulator's arrays, walked as before) and only
chooses the programs each SM runs: programs sorted by their work (``program_work``: the K extent of their
tiles plus a per-tile overhead), dealt to the SMs in a snake (slot 0 heaviest first, slot 1 lightest first),
so each SM pairs a heavy program with a light one. The kernel reads it by SM id and slot
(``tiles._placed_span``). Pure numpy (tested on the CPU).
"""

import numpy as np

from xstage.errors import InputError

# per-tile cost outside the mainloop in units of K (the tile logs: ~3 us between tiles against ~15.5 us of a
# K = 1536 mainloop at two programs per SM, i.e. ~300; rounded to four K steps of 64)
TILE_OVERHEAD_K = 256


def program_work(tiles: np.ndarray, offsets: np.ndarray, hidden: int, intermediate: int,
                 overhead_k: int = TILE_OVERHEAD_K) -> np.ndarray:
    """Work of every program of a schedule's arrays: sum over its tiles of K (hidden for Linear-1,
    intermediate for Linear-2; the tiles are all BLOCK_M x BLOCK_N) + ``overhead_k``."""
    tiles = np.asarray(tiles)
    offsets = np.asarray(offsets, dtype=np.int64)
    k = np.where(tiles[:, 0] == 0, int(hidden), int(intermediate)) + int(overhead_k) if len(tiles) else np.zeros(0)
    csum = np.concatenate([[0], np.cumsum(k)])
    return (csum[offsets[1:]] - csum[offsets[:-1]]).astype(np.int64)


def balanced_placement(work: np.ndarray, n_sm: int, per_sm: int) -> np.ndarray:
    """int32 [n_sm * per_sm]: entry ``sm * per_sm + slot`` is the program that slot of that SM runs.

    Programs by decreasing work, dealt in a snake over the SMs (slot 0: SM 0, 1, ...; slot 1: back from the
    last SM), so the heaviest program meets the lightest. Every program appears exactly once."""
    work = np.asarray(work)
    if n_sm < 1 or per_sm < 1 or len(work) != n_sm * per_sm:
        raise InputError("programs", len(work), f"must be n_sm x per_sm = {n_sm} x {per_sm} to place them per SM")
    order = np.argsort(-work, kind="stable")
    place = np.empty((n_sm, per_sm), dtype=np.int32)
    for slot in range(per_sm):
        chunk = order[slot * n_sm:(slot + 1) * n_sm]
        place[:, slot] = chunk if slot % 2 == 0 else chunk[::-1]
    return place.reshape(-1)


def sm_work(work: np.ndarray, place: np.ndarray, per_sm: int) -> np.ndarray:
    """Work per SM under ``place`` (the quantity the placement evens out)."""
    return np.asarray(work)[np.asarray(place).reshape(-1, per_sm)].sum(axis=1)
