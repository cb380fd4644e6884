"""The two engines behind ``xstage.sim.replay.replay``: a simpy reference and a fast heap loop.

Both return ``(per_tile, extras)``: per_tile arrays ml_start, ml_end, epi_start, epi_end, stall,
dep_wait (NaN where a tile never ran: deadlock), extras drain_end, peak, occ_t, occ_q.
The fast engine inlines ``FluidXStage``'s fluid queue (same equations, same tolerances, same
"recompute once per instant" rule) so that both agree to floating-point noise.
"""

import heapq
import itertools
import math

import numpy as np
import simpy

from xstage.sim.schedules import KIND_L1, KIND_L2
from xstage.sim.xqueue import FluidXStage

_EPS = 1e-9
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

def run_simpy(schedule, ml, nbytes, platform, cfg, K):
    T = len(schedule.tiles)
    tiles = schedule.tiles
    off = schedule.sm_offsets
    env = simpy.Environment()
    queue = FluidXStage(env, platform.drain_rate_Bpus, platform.capacity_bytes(K), coupled=cfg.coupled,
                        record=cfg.record_occupancy)
    rate = _rate_table(platform, K)
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
                if cfg.cover_us > 0:
                    start = env.now
                    yield epi_done[slot]
                    covered = min(cfg.cover_us, ml[g], env.now - start)
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
                yield queue.issue(nbytes[g], rate(nbytes[g]))
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

class _Queue:
    """FluidXStage's fluid dynamics without simpy: the caller owns the event heap."""
    __slots__ = ("R", "Q", "coupled", "level", "admitted", "drained", "vclock", "scale", "demand", "active",
                 "waiting", "t_last", "version", "dirty", "peak", "log_t", "log_q", "seq")

    def __init__(self, R, Q, coupled, record):
        self.R, self.Q, self.coupled = R, Q, coupled
        self.level = self.admitted = self.drained = self.vclock = self.demand = 0.0
        self.scale = 1.0
        self.active, self.waiting = [], []
        self.t_last = 0.0
        self.version = 0
        self.dirty = False
        self.peak = 0.0
        self.log_t = [] if record else None
        self.log_q = [] if record else None
        self.seq = itertools.count()

    def advance(self, now):
        dt = now - self.t_last
        if dt <= 0:
            return
        admit = self.demand * self.scale
        drain = self.R if self.level > _EPS * self.Q else min(self.R, admit)
        level = self.level + (admit - drain) * dt
        self.level = min(max(level, 0.0), self.Q)
        self.admitted += admit * dt
        self.drained += drain * dt
        self.vclock += self.scale * dt
        self.t_last = now

    def recompute(self, now, done):
        """Settle at ``now``; append finished (or, coupled, drained) producers to ``done``; return horizon."""
        self.dirty = False
        self.advance(now)
        vtol = _EPS * max(1.0, abs(self.vclock))
        active = self.active
        while active and active[0][0] <= self.vclock + vtol:
            _, _, rate, who = heapq.heappop(active)
            self.demand -= rate
            if self.coupled:
                heapq.heappush(self.waiting, (self.admitted, next(self.seq), who))
            else:
                done.append(who)
        if not active:
            self.demand = 0.0
        if self.level <= _EPS * self.Q:
            self.level = 0.0
        btol = _EPS * max(1.0, self.admitted)
        waiting = self.waiting
        while waiting and waiting[0][0] <= self.drained + btol:
            done.append(heapq.heappop(waiting)[2])
        # scale
        if self.level >= self.Q * (1 - 1e-12) and self.demand > self.R:
            self.level = self.Q
            self.scale = self.R / self.demand
        else:
            self.scale = 1.0
        if self.level > self.peak:
            self.peak = self.level
        if self.log_t is not None:
            if self.log_t and self.log_t[-1] == now:
                self.log_q[-1] = self.level
            else:
                self.log_t.append(now)
                self.log_q.append(self.level)
        # next change
        admit = self.demand * self.scale
        drain = self.R if self.level > _EPS * self.Q else min(self.R, admit)
        horizon = math.inf
        if active:
            horizon = (active[0][0] - self.vclock) / self.scale
        if admit > drain and self.level < self.Q:
            horizon = min(horizon, (self.Q - self.level) / (admit - drain))
        elif drain > admit and self.level > 0.0:
            horizon = min(horizon, self.level / (drain - admit))
        if waiting and drain > 0:
            horizon = min(horizon, max(waiting[0][0] - self.drained, 0.0) / drain)
        return horizon


def run_fast(schedule, ml_arr, nbytes_arr, platform, cfg, K):  # noqa: C901 - one loop, on purpose
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
    cover = cfg.cover_us
    lat = cfg.completion_latency_us if cfg.coupled else 0.0
    local_us, remote_us = cfg.local_epilogue_us, cfg.remote_epilogue_us
    uniq, inverse = np.unique(nbytes_arr, return_inverse=True)
    rate = np.array([platform.producer_rate_Bpus(K, b) if b > 0 else 0.0 for b in uniq])[inverse].tolist()
    q = _Queue(platform.drain_rate_Bpus, platform.capacity_bytes(K), cfg.coupled, cfg.record_occupancy)
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
    done = []

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
            if cover > 0:
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
        r = rate[g]
        q.advance(t)
        heapq.heappush(q.active, (q.vclock + nbytes[g] / r, next(q.seq), r, s))
        q.demand += r
        if not q.dirty:
            q.dirty = True
            q.version += 1
            push(heap, (t, nxt(), _QUEUE, q.version))

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
                covered = min(cover, ml[m], t - t0)
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
            if a != q.version:
                continue
            horizon = q.recompute(t, done)
            if horizon < math.inf:
                q.version += 1
                push(heap, (t + max(horizon, 0.0), nxt(), _QUEUE, q.version))
            if done:
                finished = done[:]
                done.clear()
                for s in finished:
                    if lat > 0:
                        push(heap, (t + lat, nxt(), _EPI_END, s))
                    else:
                        end_epi(s, t)
    out = {"ml_start": np.array(ml_start), "ml_end": np.array(ml_end), "epi_start": np.array(epi_start),
           "epi_end": np.array(epi_end), "stall": np.array(stall), "dep_wait": np.array(dep_wait)}
    occ_t = np.array(q.log_t) if q.log_t is not None else np.zeros(0)
    occ_q = np.array(q.log_q) if q.log_q is not None else np.zeros(0)
    return out, {"drain_end": t, "peak": q.peak, "occ_t": occ_t, "occ_q": occ_q}
