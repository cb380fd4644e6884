"""FlashAttention Q-loop schedule: persistent programs over b_m x d output tiles (the paper's Fig. 6).

Output tile (head h, query block m) is the unit of work; its mainloop is the Q-loop over all
ceil(M / b_n) KV tiles, and at its end the owning program issues the tile's b_m * d * s_out bytes
(the paper's burst, Sec. 4.3). Tiles are numbered head-major, t = h * ceil(M / b_m) + m, and dealt
round-robin to the programs: tile t runs on program t mod num_sms, in increasing t, which is how a
persistent kernel with a static tile scheduler walks them. Exported with kind 2 (``KIND_FA``),
expert = head, m_block = query block, n_block = 0, row = t, l2_need = 0.
"""

import math

import numpy as np

from xstage.errors import InputError, require_int
from xstage.sim.schedules import KIND_FA, TILE_COLUMNS, Schedule


def fa_qloop(heads: int, seq_len: int, num_sms: int, *, block_m: int = 128) -> Schedule:
    heads = require_int("heads", heads)
    seq_len = require_int("seq_len", seq_len)
    num_sms = require_int("num_sms", num_sms)
    block_m = require_int("block_m", block_m)
    if seq_len % block_m:
        raise InputError("block_m", block_m, f"must divide seq_len={seq_len}")
    m_blocks = seq_len // block_m
    total = heads * m_blocks
    t = np.arange(total)
    sm = t % num_sms
    order = np.lexsort((t, sm))            # program-major, then tile order
    t, sm = t[order], sm[order]
    counts = np.bincount(sm, minlength=num_sms)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    seq = np.arange(total) - np.repeat(offsets[:-1], counts)
    tiles = np.zeros((total, len(TILE_COLUMNS)), dtype=np.int32)
    tiles[:, 0] = KIND_FA
    tiles[:, 1] = t // m_blocks
    tiles[:, 2] = t % m_blocks
    tiles[:, 4] = sm
    tiles[:, 5] = seq
    tiles[:, 6] = t
    return Schedule("fa_qloop", tiles, offsets, {"heads": heads, "seq_len": seq_len, "block_m": block_m,
                                                  "num_sms": num_sms})


def burst_waves(heads: int, seq_len: int, num_sms: int, block_m: int = 128) -> int:
    """N_t: output-burst waves, ceil(tiles / programs)."""
    return math.ceil(heads * (seq_len // block_m) / num_sms)
