"""Where a staggered FlashAttention kernel issues each staged tile's store (``FaKernel.send = "stagger"``).

The replay runs each program as mainloop -> issue -> next mainloop, so a store issued partway through a later
mainloop is replayed by moving the boundary between two of the program's items to that point. The Triton stagger
and the FA4 stagger without a split count the send's due step in the next tile's K/V steps (``due_over = "tile"``:
``staggered_items``, with ``due_steps``; ``hold_us``: how far the next mainloop may run before it waits for the
store, ``FaKernel.hold``). The split kernels (``hw/attention/fa4_split_kernel.py``) count it otherwise, read from
their code (b: the CTA = the replay's program; span: ``stagger_span``; off: ``send_step_offset``; a unit of s K/V
blocks calls the per-step hook s - 1 times, the d-th call after d blocks):

    unit     ``PersistentSm90Split`` / ``Split1``: the store goes at hook call due = off + (b mod 16) * s // (16 span)
             of the next unit (its own s blocks: half a tile for a split unit), or at that unit's end when the
             hook never reaches due (the next epilogue, or a partner's, issues a pending send first)
    window   ``PersistentSm90SplitWindow``: the CTA's send window, W = the hook calls of the units after the
             staging one up to and including the next unit that stages a tile (a whole tile or an owner; a
             partner stages nothing) or the last unit (``fa4_persistent.split_window``); the store goes at hook
             call due = off + (b mod 16) * W // (16 span) of that window, counted down across units, or at the
             window's end

A unit stages a tile when it is whole or an owner (``fa_work_items``' owner flag); the program's last staged
tile is sent at the program's end (``split_send_mainloops``). Pure numpy; ``k`` is a ``sim.predict.FaKernel``.
"""

import numpy as np

from xstage.errors import InputError
from xstage.sim.schedule_fa import SEND_SLOTS, staggered_mainloops
from xstage.sim.schedules import TILE_N_BLOCK, TILE_SM

DUE_OVER = ("tile", "unit", "window")
SLOTS = SEND_SLOTS  # 16, PersistentSm90Stagger's STAGGER_GROUPS too: CTAs b, b + 16, ... share a due step


def unit_steps(schedule, share, n_steps: int) -> np.ndarray:
    """K/V blocks per item (schedule order): n for a whole tile; for part ``n_block`` of a tile split in P = 1 / share
    parts, FA4's split arithmetic (``BlockInfo``: ceil(n / P) blocks per split, the last split the rest)."""
    parts = np.rint(1.0 / np.asarray(share, dtype=float)).astype(np.int64)
    part = schedule.tiles[:, TILE_N_BLOCK].astype(np.int64)
    per = -(-n_steps // parts)
    return np.minimum(per, n_steps - part * per)


def send_window(j: int, steps, stages, rule: str) -> tuple[list, int]:
    """(items, hook calls) of a program's send window after its staged item j (not its last): the next item and its
    s blocks ("unit"), or the items up to the next one that stages (or the last) and their hook calls ("window")."""
    if rule == "unit":
        return [j + 1], int(steps[j + 1])
    window, k, last = [], j + 1, len(steps) - 1
    while True:
        window.append(k)
        if stages[k] or k == last:
            return window, int(sum(int(steps[i]) - 1 for i in window))
        k += 1


def _send_point(b: int, j: int, S, ml, steps, stages, rule: str, span: int, offset: int):
    """(item k, time) of program b's send of its item j (not its last item): the boundary before item k moves there."""
    window, calls = send_window(j, steps, stages, rule)
    due = offset + (b % SLOTS) * calls // (SLOTS * span)
    if rule == "window" and due > calls:
        due = calls + 1   # never reached by a hook: sent at the window's end
    for k in window:
        hooks = int(steps[k]) - 1 if rule == "window" else int(steps[k])
        if due <= hooks or k == window[-1]:
            return k, S[k] + min(due, int(steps[k])) * ml[k] / steps[k]
        due -= hooks
    raise AssertionError("unreachable")


def split_send_mainloops(schedule, ml, nbytes, stages, steps, rule: str, span: int, offset: int):
    """(mainloops, bytes) per item, schedule order, that make a replay issue each staged item's bytes at its send
    point under ``rule`` ("unit" | "window"): each program's compute (sum of ``ml``) unchanged, every staged byte
    issued once, after its own item's compute and before the program's end."""
    if rule not in ("unit", "window"):
        raise InputError("due_over", rule, "must be unit or window here (tile: sim.predict._staggered)")
    ml = np.asarray(ml, dtype=float)
    nbytes = np.asarray(nbytes, dtype=float)
    stages = np.asarray(stages, dtype=bool)
    out_ml, out_b = ml.copy(), np.zeros_like(nbytes)
    off = schedule.sm_offsets
    for b in range(schedule.num_sms):
        lo, hi = int(off[b]), int(off[b + 1])
        if hi == lo:
            continue
        m, st, sb = ml[lo:hi], steps[lo:hi], stages[lo:hi]
        E = np.cumsum(m)
        S = E - m
        B = E.copy()                     # item k's mainloop ends at B[k]
        pb = np.zeros(hi - lo)
        if not sb.any():
            continue
        for j in np.flatnonzero(sb):
            if j == hi - lo - 1:
                pb[j] += nbytes[lo + j]     # the last tile: sent at the program's end
                continue
            k, t = _send_point(b, int(j), S, m, st, sb, rule, span, offset)
            B[k - 1] = min(t, E[k])
            pb[k - 1] += nbytes[lo + j]
        out_ml[lo:hi] = np.maximum(np.diff(np.concatenate([[0.0], B])), 0.0)
        out_b[lo:hi] = pb
    return out_ml, out_b


def staggered_items(k, schedule, ml: np.ndarray) -> np.ndarray:
    """Per-item mainloops that send each tile at its program's due step of the next Q-loop: the Triton
    kernel's ``(p mod 16) * n // 32`` (``staggered_mainloops``), plus ``send_step_offset`` K/V steps.
    PersistentSm90Stagger (``hw/attention/fa4_persistent_kernel.py``) sends at step ``1 + (b mod 16) * n // 32``:
    its hook runs in FA4's per-K/V-step method, which the first step (``first_half_block_overlap``) does not
    call, so its offset is 1 -- read from the kernel's code, not fitted. Same shift as ``staggered_mainloops``
    (send at delta_j into tile j's Q-loop = move delta_j from tile j to the tile before it)."""
    if not k.send_step_offset and k.stagger_span == 2:
        return staggered_mainloops(schedule, ml, k.kv_steps)
    sm = schedule.tiles[:, TILE_SM].astype(np.int64)
    delta = due_steps(k, sm) * ml / k.kv_steps
    first = np.ones(len(ml), dtype=bool)
    first[1:] = sm[1:] != sm[:-1]          # schedule order is program-major
    last = np.ones(len(ml), dtype=bool)
    last[:-1] = sm[:-1] != sm[1:]
    out = ml - np.where(first, 0.0, delta)
    out[:-1] += np.where(last[:-1], 0.0, delta[1:])
    return out


def due_steps(k, sm: np.ndarray) -> np.ndarray:
    """The due step per program: send_step_offset + (p mod 16) * n // (16 * stagger_span) (span 2:
    ``send_due_steps``)."""
    return (sm % SLOTS) * k.kv_steps // (k.stagger_span * SLOTS) + k.send_step_offset


def hold_us(k, schedule, ml: np.ndarray) -> np.ndarray | None:
    """Per replay item (unshifted mainloops ``ml``), how far it may run before it needs the previous item's
    store to have left its SM: None for ``hold = issue`` (today: the next mainloop waits for it). ``next_epilogue``
    (``hw/attention/fa4_persistent_kernel.py``: PersistentSm90's and PersistentSm90Stagger's epilogues wait for
    the previous TMA store's shared-memory read, ``cp_async_bulk_wait_group(0, read=True)``, at the start of the
    next epilogue, not after the store): up to the end of the item's own tile's Q-loop. Tile-end send: the whole
    item; stagger (an item runs from its tile's send point delta_j to the next tile's): qloop_j - delta_j."""
    if k.hold == "issue":
        return None
    if k.send != "stagger":
        return ml.copy()
    sm = schedule.tiles[:, TILE_SM].astype(np.int64)
    delta = due_steps(k, sm) * ml / k.kv_steps
    first = np.ones(len(ml), dtype=bool)
    first[1:] = sm[1:] != sm[:-1]
    return ml - np.where(first, 0.0, delta)
