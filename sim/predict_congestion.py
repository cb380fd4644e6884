"""A FlashAttention kernel's exposure when a backlogged host link stalls every SM (the sixth FA rule, issue 15).

The persistent FA4 ``drain`` kernel's tile log (``data/attention-fa4/pers7-tilelog``) shows what the SM-side stage
(``FaKernel.exit_waits_for_drain``) gets wrong for tile-end bursts: after a wave's stores, EVERY fused mainloop is
stretched by about the same amount -- programs whose own previous tile was local (sent nothing) as much as those
that sent (16K: 60.0 against 61.5 us median; 32K: 56.8 / 59.9; 64K: 14.5 / 16.1) -- and within a wave the stretch
falls, not rises, with the SM's place in the drain order. So the cost is not the SM waiting for its own bytes; it is
a congestion cost on every running mainloop while the link is backlogged, and staggered sends, which never build a
backlog, do not pay it (their fused mainloops run at the FA-only pace). The model:

    compute   every program walks its items back to back at its own pace (``sim.predict``'s items: tile order,
              split tail, program spread, mainloop factor, the stagger's moved boundaries), no wait for its own
              stores (no SM-side stage, no cover window: a store is issued at its item's end, in no time)
    link      the stores enter one FIFO fluid queue drained at the platform's R, with no capacity cap
    stall     while the queue holds more than ``q_c`` bytes, no program makes progress: all SMs stall together
              until the backlog has drained to ``q_c`` (``q_c`` = inf: nothing stalls, the one-stage queue with
              an unbounded buffer)

The fused time is the later of the last program's end and the last byte drained; the FA-only time is the FA-only
items' makespan (the same as ``predict_fa``'s). Exact and event-driven: the stall is global, so real time is the
programs' compute time plus the stall accumulated before it. Pure numpy; ``k`` is a ``sim.predict.FaKernel``.
"""

import math

import numpy as np

from xstage.errors import InputError, require_positive
from xstage.sim import predict as P
from xstage.sim.predict_sends import split_send_mainloops, unit_steps
from xstage.sim.predict_sends import staggered_items
from xstage.sim.schedules import TILE_COLUMNS

SM, SEQ = TILE_COLUMNS.index("sm"), TILE_COLUMNS.index("seq")


def item_ends(schedule, ml) -> np.ndarray:
    """Each item's end in compute time (schedule order): its program's items back to back in ``seq`` order."""
    sm = schedule.tiles[:, SM].astype(np.int64)
    order = np.lexsort((schedule.tiles[:, SEQ], sm))
    ends = np.empty(len(ml))
    csum = np.cumsum(np.asarray(ml, dtype=float)[order])
    first = np.r_[True, sm[order][1:] != sm[order][:-1]]
    base = np.maximum.accumulate(np.where(first, np.r_[0.0, csum[:-1]], 0.0))
    ends[order] = csum - base
    return ends


def stalled_link(ends, nbytes, drain_Bpus: float, q_c: float) -> dict:
    """The global stall over sends issued at compute times ``ends`` (bytes ``nbytes``): stall total, the compute
    makespan in real time, the last byte drained and the peak backlog."""
    ends, nbytes = np.asarray(ends, dtype=float), np.asarray(nbytes, dtype=float)
    sel = nbytes > 0
    times, idx = np.unique(ends[sel], return_inverse=True)     # sends of one instant enter the queue together
    batch = np.bincount(idx, weights=nbytes[sel], minlength=len(times))
    stall = q = t_prev = peak = 0.0
    tau_end = float(ends.max()) if len(ends) else 0.0
    stall_before_end = 0.0
    for tau, b in zip(times, batch):
        t = tau + stall
        q = max(0.0, q - drain_Bpus * (t - t_prev)) + b
        peak, t_prev = max(peak, q), t
        if q > q_c:
            d = (q - q_c) / drain_Bpus
            stall += d
            q, t_prev = q_c, t + d
        if tau < tau_end:
            stall_before_end = stall
    return {"stall_us": stall, "compute_end_us": tau_end + stall_before_end,
            "drain_end_us": t_prev + q / drain_Bpus, "peak_backlog_bytes": peak}


def fused_items(k, platform):
    """(fa_schedule, fa item times, schedule, fused item times, remote bytes per item) as ``predict_fa`` builds them
    (the SM-side stage and ``hold`` left out: this model has no per-SM wait)."""
    programs = k.num_sms or platform.sm_count
    fa_sched, fa_share, _ = P.work_items(k, programs, k.fa_tail_parts)
    schedule, share, owner = P.work_items(k, programs, k.tail_parts)
    nbytes = P.tile_remote_bytes(k, schedule, owner)
    fa_share = fa_share * P.program_factors(k, programs, k.fa_program_spread)[fa_sched.tiles[:, SM]]
    share = share * P.program_factors(k, programs)[schedule.tiles[:, SM]]
    fa_waves = float(item_ends(fa_sched, fa_share).max())
    qloop = P.qloop_us(k, platform, int(owner.sum()), programs, fa_waves)
    ml = share * qloop * float(k.mainloop_factor)
    if k.send == "stagger" and k.due_over == "tile":
        ml = staggered_items(k, schedule, ml)
    elif k.send == "stagger":
        ml, nbytes = split_send_mainloops(schedule, ml, nbytes, owner, unit_steps(schedule, share, k.kv_steps),
                                          k.due_over, k.stagger_span, k.send_step_offset)
    return fa_sched, fa_share * qloop, schedule, ml, nbytes


def predict_congested(k, platform, q_c_bytes: float) -> dict:
    """FA-only and fused times of ``k`` under the global-stall model (module docstring), ``q_c_bytes`` the backlog
    above which every SM stalls."""
    if not (isinstance(q_c_bytes, (int, float)) and (q_c_bytes >= 0 or math.isinf(q_c_bytes))):
        raise InputError("q_c_bytes", q_c_bytes, "must be a number >= 0 (inf: no stall)")
    require_positive("drain rate", platform.drain_rate_Bpus)
    fa_sched, fa_ml, schedule, ml, nbytes = fused_items(k, platform)
    fa_us = float(item_ends(fa_sched, fa_ml).max())
    link = stalled_link(item_ends(schedule, ml), nbytes, platform.drain_rate_Bpus, float(q_c_bytes))
    fused_us = max(link["compute_end_us"], link["drain_end_us"])
    a2a_us = float(nbytes.sum()) / platform.drain_rate_Bpus
    e_res = fused_us - fa_us
    return {"M": k.seq_len, "fa_us": fa_us, "fused_us": fused_us, "E_res_us": e_res, "a2a_us": a2a_us,
            "hiding_ratio": 1.0 - e_res / a2a_us if a2a_us > 0 else float("nan"),
            "stall_us": link["stall_us"], "peak_backlog_MiB": link["peak_backlog_bytes"] / 2**20,
            "q_c_MiB": float(q_c_bytes) / 2**20, "remote_MiB": float(nbytes.sum()) / 2**20}
