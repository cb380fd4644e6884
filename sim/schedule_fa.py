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
from xstage.sim.schedules import (KIND_FA, TILE_EXPERT, TILE_FIELDS, TILE_KIND, TILE_M_BLOCK, TILE_N_BLOCK, TILE_ROW,
                                  TILE_SEQ, TILE_SM, Schedule)


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
    tiles = np.zeros((total, len(TILE_FIELDS)), dtype=np.int32)
    tiles[:, TILE_KIND] = KIND_FA
    tiles[:, TILE_EXPERT] = t // m_blocks
    tiles[:, TILE_M_BLOCK] = t % m_blocks
    tiles[:, TILE_SM] = sm
    tiles[:, TILE_SEQ] = seq
    tiles[:, TILE_ROW] = t
    return Schedule("fa_qloop", tiles, offsets, {"heads": heads, "seq_len": seq_len, "block_m": block_m,
                                                  "num_sms": num_sms})


def burst_waves(heads: int, seq_len: int, num_sms: int, block_m: int = 128) -> int:
    """N_t: output-burst waves, ceil(tiles / programs)."""
    return math.ceil(heads * (seq_len // block_m) / num_sms)


SEND_SLOTS = 16  # the fused kernel's stagger: programs p, p + 16, ... send at the same point (hw/attention/kernel.py)


def send_due_steps(program, n_steps: int, slots: int = SEND_SLOTS) -> np.ndarray:
    """K/V steps from staging a finished tile to sending it, per program id: (p mod slots) * n_steps // (2 slots).

    The fused kernel's ``stagger`` send (``hw/attention/kernel.py``, ``_fa_fwd_kernel``): always under half a Q-loop."""
    n_steps = require_int("n_steps", n_steps)
    slots = require_int("slots", slots)
    p = np.asarray(program, dtype=np.int64)
    if p.size and p.min() < 0:
        raise InputError("program", int(p.min()), "must be >= 0")
    return (p % slots) * n_steps // (2 * slots)


def staggered_mainloops(schedule: Schedule, qloop_us, n_steps: int, slots: int = SEND_SLOTS) -> np.ndarray:
    """Per-tile mainloop times (schedule order) that make a replay send each tile as the stagger does.

    The kernel sends a finished tile whole once its program has run ``send_due`` K/V steps of the next
    Q-loop (``send_due_steps`` of the program, the schedule's ``sm`` column), and its last tile at its end.
    The replay runs each program as mainloop -> issue -> next mainloop, so a send at delta_j = send_due *
    qloop_j / n_steps into tile j's Q-loop is the same as moving delta_j from tile j to the tile before it:
    mainloop'_j = qloop_j - delta_j (not the program's first tile) + delta_{j+1} (not its last tile).
    With equal Q-loops: first tile + delta, last tile - delta, the ones between unchanged; a program of
    one tile keeps its Q-loop. Each program's total and end of compute are unchanged; every value is
    >= qloop_j * (1 - 15/32) > 0. ``qloop_us``: one Q-loop time or one per tile, in schedule order.
    """
    T = len(schedule.tiles)
    q = np.broadcast_to(np.asarray(qloop_us, dtype=float), (T,)).astype(float)
    if T and (not np.all(np.isfinite(q)) or q.min() < 0):
        raise InputError("qloop_us", float(q.min()), "must be finite and >= 0")
    sm = schedule.tiles[:, TILE_SM].astype(np.int64)
    delta = send_due_steps(sm, n_steps, slots) * q / n_steps
    first = np.ones(T, dtype=bool)
    first[1:] = sm[1:] != sm[:-1]          # schedule order is program-major (fa_qloop)
    last = np.ones(T, dtype=bool)
    last[:-1] = sm[:-1] != sm[1:]
    out = q - np.where(first, 0.0, delta)
    out[:-1] += np.where(last[:-1], 0.0, delta[1:])
    return out


ORDERS = ("head_major", "local_last")


def local_last_order(heads: int, m_blocks: int, local_blocks: int, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(head, m_block) of each position when the tiles of the sender's own chunk come last: remote tiles
    head-major with m-blocks ascending (the own chunk skipped), then the own chunk's, head-major. The Triton
    kernel's ``local_last`` order (``hw/attention/tiles.py``, ``_local_last``; its tile logs show it)."""
    pos = np.arange(heads * m_blocks)
    per_head = m_blocks - local_blocks
    n_remote = heads * per_head
    r = pos % max(per_head, 1)
    mb_remote = r + np.where(r >= rank * local_blocks, local_blocks, 0)
    l_idx = np.maximum(pos - n_remote, 0)
    is_local = pos >= n_remote
    head = np.where(is_local, l_idx // max(local_blocks, 1), pos // max(per_head, 1))
    m_block = np.where(is_local, rank * local_blocks + l_idx % max(local_blocks, 1), mb_remote)
    return head, m_block


def fa_work_items(heads: int, seq_len: int, num_sms: int, *, block_m: int = 128, order: str = "head_major",
                  world_size: int = 1, rank: int = 0, tail_parts: int = 1) -> tuple[Schedule, np.ndarray, np.ndarray]:
    """The persistent FA kernel's work items: (schedule, share of a Q-loop per item, owner flag per item).

    Positions walk the tiles in ``order`` (``head_major``: tile = head * m_blocks + m_block, as ``fa_qloop``;
    ``local_last``: ``local_last_order`` with the chunks of ``world_size`` ranks). With ``tail_parts`` P > 1
    each tile of the last, partial wave (tiles mod programs, when not 0) runs as P items of 1/P of a Q-loop
    on consecutive item numbers (the kernel's ``split_tail``); only the last part owns the epilogue (its
    bytes), which the kernel gives to the part that arrives last. Item i runs on program i mod num_sms, in
    increasing i. With P = 1 and ``head_major`` this is ``fa_qloop`` (same tiles, same order)."""
    for name, v in (("heads", heads), ("seq_len", seq_len), ("num_sms", num_sms), ("block_m", block_m),
                    ("world_size", world_size), ("tail_parts", tail_parts)):
        require_int(name, v)
    if seq_len % block_m:
        raise InputError("block_m", block_m, f"must divide seq_len={seq_len}")
    if order not in ORDERS:
        raise InputError("order", order, f"must be one of {', '.join(ORDERS)}")
    m_blocks = seq_len // block_m
    if order == "local_last":
        if m_blocks % world_size:
            raise InputError("world_size", world_size, f"must divide the {m_blocks} m-blocks")
        head, m_block = local_last_order(heads, m_blocks, m_blocks // world_size, rank)
    else:
        pos = np.arange(heads * m_blocks)
        head, m_block = pos // m_blocks, pos % m_blocks
    total = heads * m_blocks
    tail = total % num_sms
    parts = tail_parts if tail and tail_parts > 1 else 1
    n_full = total - tail if parts > 1 else total
    rep = np.concatenate([np.ones(n_full, dtype=np.int64), np.full(total - n_full, parts, dtype=np.int64)])
    head, m_block = np.repeat(head, rep), np.repeat(m_block, rep)
    share = np.repeat(1.0 / rep, rep)
    part = np.arange(len(share)) - np.repeat(np.cumsum(rep) - rep, rep)
    owner = part == np.repeat(rep, rep) - 1
    n = len(share)
    item = np.arange(n)
    sm = item % num_sms
    idx = np.lexsort((item, sm))
    counts = np.bincount(sm, minlength=num_sms)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    tiles = np.zeros((n, len(TILE_FIELDS)), dtype=np.int32)
    tiles[:, TILE_KIND] = KIND_FA
    tiles[:, TILE_EXPERT] = head[idx]
    tiles[:, TILE_M_BLOCK] = m_block[idx]
    tiles[:, TILE_N_BLOCK] = part[idx]     # the K/V part of a split tail tile, else 0
    tiles[:, TILE_SM] = sm[idx]
    tiles[:, TILE_SEQ] = np.arange(n) - np.repeat(offsets[:-1], counts)
    tiles[:, TILE_ROW] = item[idx]
    sched = Schedule("fa_items", tiles, offsets, {"heads": heads, "seq_len": seq_len, "block_m": block_m,
                                                  "num_sms": num_sms, "order": order, "tail_parts": parts})
    return sched, share[idx], owner[idx]
