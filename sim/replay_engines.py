"""The two engines behind ``xstage.sim.replay.replay``: a simpy reference and a fast heap loop.

Both return ``(per_tile, extras)``: per_tile arrays ml_start, ml_end, epi_start, epi_end, stall,
dep_wait (NaN where a tile never ran: deadlock), extras drain_end, peak, occ_t, occ_q.
Both drive the one fluid queue, ``xstage.sim.fluid.FluidQueue``: the simpy engine through
``FluidXStage``, the fast one directly from its own event heap, with the same "settle once per
instant" rule. They differ only in the order in which same-instant events reach the queue, so they
agree to rounding on most schedules; where the schedule is drain-limited and chaotic (a rounding-level
difference in one tile's timing grows from tile to tile) per-tile times may differ by microseconds
while makespans agree closely (docs/schedules.md, "How exact a tile record is").
"""

import heapq
import itertools
import math

import numpy as np
import simpy

from xstage.sim.fluid import FluidQueue
from xstage.sim.schedules import KIND_L1, KIND_L2
from xstage.sim.xqueue import FluidXStage

_MMA_END, _EPI_END, _ISSUE, _QUEUE = 0, 1, 2, 3


def _rate_table(platform, K):
    cache = {}

    def rate(b):
        r = cache.get(b)
        if r is None:
            r = cache[b] = platform.producer_rate_Bpus(K, b)
        return r
    return rate


def _empty(T):
    return {k: np.full(T, np.nan) for k in ("ml_start", "ml_end", "epi_start", "epi_end", "stall", "dep_wait")}


# --- simpy reference ---------------------------------------------------------------------------

def _cover(cfg, T, cover_per_tile):
    """Per tile: how long its mainloop may run before it needs its staging slot (cover_us, or per tile)."""
    if cover_per_tile is None:
        return [cfg.cover_us] * T
    return np.maximum(np.asarray(cover_per_tile, dtype=float), cfg.cover_us).tolist()


def run_simpy(schedule, ml, nbytes, platform, cfg, K, cover_per_tile=None):
    T = len(schedule.tiles)
    cover = _cover(cfg, T, cover_per_tile)
    tiles = schedule.tiles
    off = schedule.sm_offsets
    env = simpy.Environment()
    queue = FluidXStage(env, platform.drain_rate_Bpus, platform.capacity_bytes(K), coupled=cfg.coupled,
                        record=cfg.record_occupancy, **platform.queue_options(K))
    rate = _rate_table(platform, K)
    pool = cfg.sm_pool_GBps * 1e3 if cfg.sm_pool_GBps is not None else None
    issuing = [0]
    S = max(cfg.staging_slots, 1)
    out = _empty(T)
    rows = int(tiles[:, 6].max()) + 1 if T else 1
    count = np.zeros(rows, dtype=np.int64)
    row_need = np.zeros(rows, dtype=np.int64)
    l2 = tiles[:, 0] == KIND_L2
    row_need[tiles[l2, 6]] = tiles[l2, 7]
    row_ready = [env.event() for _ in range(rows)]
    ml_done = [env.event() for _ in range(T)]
    epi_done = [env.event() for _ in range(T)]

    def mma(s):
        for g in range(off[s], off[s + 1]):
            free = env.now
            if tiles[g, 0] == KIND_L2 and count[tiles[g, 6]] < tiles[g, 7]:
                yield row_ready[tiles[g, 6]]
            dep = env.now
            slot = g - S
            if slot >= off[s] and not epi_done[slot].triggered:
                if cover[g] > 0:
                    start = env.now
                    yield epi_done[slot]
                    covered = min(cover[g], ml[g], env.now - start)
                    out["stall"][g] = env.now - start - covered
                    yield env.timeout(ml[g] - covered)
                else:
                    yield epi_done[slot]
                    start = env.now
                    out["stall"][g] = start - dep
                    yield env.timeout(ml[g])
            else:
                start = env.now
                out["stall"][g] = 0.0
                yield env.timeout(ml[g])
            out["ml_start"][g], out["ml_end"][g], out["dep_wait"][g] = start, env.now, dep - free
            ml_done[g].succeed()

    def epilogue(s):
        for g in range(off[s], off[s + 1]):
            if not ml_done[g].triggered:
                yield ml_done[g]
            out["epi_start"][g] = env.now
            if nbytes[g] > 0:
                if cfg.remote_epilogue_us > 0:
                    yield env.timeout(cfg.remote_epilogue_us)
                r = rate(nbytes[g]) if pool is None else min(rate(nbytes[g]), pool / (issuing[0] + 1))
                issuing[0] += 1
                yield queue.issue(nbytes[g], r)
                issuing[0] -= 1
                if cfg.coupled and cfg.completion_latency_us > 0:
                    yield env.timeout(cfg.completion_latency_us)
            else:
                yield env.timeout(cfg.local_epilogue_us)
            out["epi_end"][g] = env.now
            if tiles[g, 0] == KIND_L1:
                r = tiles[g, 6]
                count[r] += 1
                if count[r] == row_need[r]:
                    row_ready[r].succeed()
            epi_done[g].succeed()

    for s in range(schedule.num_sms):
        env.process(mma(s))
        env.process(epilogue(s))
    env.run()
    drain_end = env.now
    if queue.log is not None:
        occ_t, occ_q = np.array(queue.log[0]), np.array(queue.log[1])
    else:
        occ_t = occ_q = np.zeros(0)
    return out, {"drain_end": drain_end, "peak": queue.peak_level, "occ_t": occ_t, "occ_q": occ_q}


# --- fast engine -------------------------------------------------------------------------------

def run_fast(schedule, ml_arr, nbytes_arr, platform, cfg, K, cover_per_tile=None):  # noqa: C901 - one loop
    T = len(schedule.tiles)
    tiles = schedule.tiles
    kind = tiles[:, 0].tolist()
    row = tiles[:, 6].tolist()
    need = tiles[:, 7].tolist()
    ml = ml_arr.tolist()
    nbytes = nbytes_arr.tolist()
    off = schedule.sm_offsets.tolist()
    nsm = schedule.num_sms
    S = max(cfg.staging_slots, 1)
    cover = _cover(cfg, T, cover_per_tile)
    lat = cfg.completion_latency_us if cfg.coupled else 0.0
    local_us, remote_us = cfg.local_epilogue_us, cfg.remote_epilogue_us
    uniq, inverse = np.unique(nbytes_arr, return_inverse=True)
    rate = np.array([platform.producer_rate_Bpus(K, b) if b > 0 else 0.0 for b in uniq])[inverse].tolist()
    q = FluidQueue(platform.drain_rate_Bpus, platform.capacity_bytes(K), coupled=cfg.coupled,
                   record=cfg.record_occupancy, **platform.queue_options(K))
    qstate = [False, 0]      # queue: settle already pending at this instant, version of its pending event
    pool = cfg.sm_pool_GBps * 1e3 if cfg.sm_pool_GBps is not None else None
    issuing = [0]            # producers issuing now (sm_pool_GBps)
    nan = math.nan
    ml_start, ml_end, epi_start, epi_end = [nan] * T, [nan] * T, [nan] * T, [nan] * T
    stall, dep_wait = [nan] * T, [nan] * T
    epi_ok = [False] * T
    rows = (max(row) + 1) if T else 1
    count = [0] * rows
    waiters = {}
    jm = off[:-1]            # next tile (global index) for the MMA role
    je = list(jm)            # next tile for the epilogue role
    jm = list(jm)
    ml_ended = list(jm)      # tiles below this index have finished their mainloop
    mma_busy = [False] * nsm
    epi_busy = [False] * nsm
    free_t = [0.0] * nsm     # when the MMA role became free for tile jm
    dep_t = [-1.0] * nsm     # when tile jm's l2_full dependency was seen satisfied
    pend = [-1.0] * nsm      # cover mode: mainloop started at this time before its slot was free
    heap = []
    push, pop = heapq.heappush, heapq.heappop
    nxt = itertools.count().__next__

    def try_mma(s, t):
        if mma_busy[s]:
            return
        g = jm[s]
        if g >= off[s + 1]:
            return
        if kind[g] == KIND_L2 and count[row[g]] < need[g]:
            waiters.setdefault(row[g], []).append(s)
            return
        if dep_t[s] < 0:
            dep_t[s] = t
        slot = g - S
        if slot >= off[s] and not epi_ok[slot]:
            if cover[g] > 0:
                mma_busy[s] = True
                pend[s] = t
                ml_start[g] = t
                dep_wait[g] = t - free_t[s]
            return
        mma_busy[s] = True
        ml_start[g] = t
        stall[g] = t - dep_t[s]
        dep_wait[g] = dep_t[s] - free_t[s]
        push(heap, (t + ml[g], nxt(), _MMA_END, s))

    def start_issue(s, t):
        g = je[s]
        r = rate[g] if pool is None else min(rate[g], pool / (issuing[0] + 1))
        issuing[0] += 1
        q.add(t, nbytes[g], r, s)
        if not qstate[0]:
            qstate[0] = True
            qstate[1] += 1
            push(heap, (t, nxt(), _QUEUE, qstate[1]))

    def try_epi(s, t):
        if epi_busy[s]:
            return
        g = je[s]
        if g >= ml_ended[s]:
            return
        epi_busy[s] = True
        epi_start[g] = t
        if nbytes[g] > 0:
            if remote_us > 0:
                push(heap, (t + remote_us, nxt(), _ISSUE, s))
            else:
                start_issue(s, t)
        else:
            push(heap, (t + local_us, nxt(), _EPI_END, s))

    def end_epi(s, t):
        g = je[s]
        epi_end[g] = t
        epi_ok[g] = True
        epi_busy[s] = False
        je[s] = g + 1
        if kind[g] == KIND_L1:
            r = row[g]
            count[r] += 1
            ws = waiters.get(r)
            if ws and count[r] >= need[jm[ws[0]]]:
                del waiters[r]
                for w in ws:
                    try_mma(w, t)
        m = jm[s]
        if m < off[s + 1] and m - S == g:
            if pend[s] >= 0:   # cover mode: the running mainloop gets its slot now
                t0 = pend[s]
                pend[s] = -1.0
                covered = min(cover[m], ml[m], t - t0)
                stall[m] = t - t0 - covered
                push(heap, (t + ml[m] - covered, nxt(), _MMA_END, s))
            elif not mma_busy[s] and dep_t[s] >= 0:   # it waits for this slot, not for l2_full
                try_mma(s, t)
        try_epi(s, t)

    for s in range(nsm):
        try_mma(s, 0.0)
    t = 0.0
    while heap:
        t, _, typ, a = pop(heap)
        if typ == _MMA_END:
            g = jm[a]
            ml_end[g] = t
            mma_busy[a] = False
            jm[a] = g + 1
            ml_ended[a] = g + 1
            free_t[a] = t
            dep_t[a] = -1.0
            if not epi_busy[a]:
                try_epi(a, t)
            if g + 1 < off[a + 1]:
                try_mma(a, t)
        elif typ == _EPI_END:
            end_epi(a, t)
        elif typ == _ISSUE:
            start_issue(a, t)
        else:
            if a != qstate[1]:
                continue
            qstate[0] = False
            finished, horizon = q.settle(t)
            if horizon < math.inf:
                qstate[1] += 1
                push(heap, (t + horizon, nxt(), _QUEUE, qstate[1]))
            if finished:
                issuing[0] -= len(finished)
                for s in finished:
                    if lat > 0:
                        push(heap, (t + lat, nxt(), _EPI_END, s))
                    else:
                        end_epi(s, t)
    out = {"ml_start": np.array(ml_start), "ml_end": np.array(ml_end), "epi_start": np.array(epi_start),
           "epi_end": np.array(epi_end), "stall": np.array(stall), "dep_wait": np.array(dep_wait)}
    occ_t = np.array(q.log[0]) if q.log is not None else np.zeros(0)
    occ_q = np.array(q.log[1]) if q.log is not None else np.zeros(0)
    return out, {"drain_end": t, "peak": q.peak, "occ_t": occ_t, "occ_q": occ_q}
