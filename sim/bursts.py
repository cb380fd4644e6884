"""Burst experiments on the simulated X-Stage (the paper's Sec. 3.1 microbenchmarks).

Modes:
    periodic   K producers repeat: issue B bytes, then a producer-side gap G.
    isolated   every burst starts from an empty X-Stage: all producers issue once, the queue drains
               completely, then G, then the next burst.
    local      the local-memory control: no X-Stage, every issue takes T_iss0.
    coupled    completion-coupled counterfactual: an issuer resumes only once its bytes drained.
    lockstep   the microbenchmark's lockstep run: every burst starts from a drained path (issue time as
               isolated), the next at max(drained, issue end + ``barrier_us``) + G (``burst_config``).

Engines: ``exact`` (``xstage.sim.bursts_exact``: the closed-form recurrence of K identical producers,
no per-producer work) and ``simpy`` (processes on ``FluidXStage`` or ``ChunkedXStage``: the reference,
the only one with an occupancy log and the chunked queue). ``auto`` takes exact for the fluid queue.

Steady state is known, not assumed: periodic bursts from an empty X-Stage settle after
``model.warmup_bursts`` bursts; summaries leave out ``skip`` bursts (default: that warm-up) and say
whether the window they report is steady, and if not how many bursts would be.

Drain order (``drain_order``): ``fair`` (today's default) slows every held-back producer by the same
factor; ``ordered`` shares the drain by fixed per-producer weights w_p = exp(-a p / (K - 1)), a =
``drain_spread`` (``xstage.sim.fluid_ordered``; simpy fluid queue only; a = 0 is ``fair``).

A relaxing capacity (schema 2) runs on simpy only; its warm-up is known only where every burst starts
empty (0), else the summary skips half the bursts and says ``steady`` None.
"""

import time
from dataclasses import asdict

import numpy as np
import pandas as pd
import simpy

from xstage.errors import InputError
from xstage.sim import model, model_two_stage
from xstage.sim.burst_config import ENGINES, MODES, BurstConfig  # noqa: F401 - moved there; re-exported
from xstage.sim.bursts_exact import uniform_bursts
from xstage.sim.platform import Platform
from xstage.sim.xqueue import ChunkedXStage, FluidXStage

SIMPY_MAX_PRODUCER_BURSTS = 5_000_000   # ~1.5 GB of Python state and records; the exact engine has no bound
MIN_ISSUE_US = 1e-6   # the simpy engine's floor on a burst's issue time (1 ps): a zero one is issued this fast


_ORDER_KEYS = ("drain_order", "drain_spread")   # in summaries only when not the default (keys unchanged)
_BARRIER_KEY = "barrier_us"                       # in summaries of mode lockstep only
_OCC_COLUMNS = ["time(us)", "queue(bytes)", "issued(bytes)", "drained(bytes)"]


class BurstResult:
    """One burst experiment. ``bursts`` (the K x n record frame) is built on first use when the exact engine
    ran, so a summary of a huge run never materialises it."""

    def __init__(self, config: BurstConfig, platform: Platform, *, frame: pd.DataFrame | None = None,
                 per_burst: dict | None = None, occupancy: pd.DataFrame | None = None,
                 peak_queue_bytes: float = 0.0, drained_us: float = float("nan"), wall_s: float = 0.0,
                 engine: str = "simpy"):
        self.config, self.platform, self.engine = config, platform.name, engine
        self._target = platform.target if config.mode != "local" else "local"
        self._frame, self.per_burst = frame, per_burst
        self.occupancy = occupancy if occupancy is not None else pd.DataFrame(columns=_OCC_COLUMNS)
        self.peak_queue_bytes, self.drained_us, self.wall_s = peak_queue_bytes, drained_us, wall_s

    @property
    def bursts(self) -> pd.DataFrame:
        """Burst record schema (xstage.records COLUMNS["burst"]): one row per producer and burst."""
        if self._frame is None:
            K = self.config.producers
            d = self.per_burst
            self._frame = _frame(self.config, self.platform, self._target,
                                 *(np.broadcast_to(d[k], (K, len(d[k]))) for k in ("start", "issue", "period")))
        return self._frame

    def skip(self, platform: Platform) -> int:
        """Bursts left out of the summary: ``config.skip``, else the closed-form warm-up (or, where none is
        known, the first half)."""
        if self.config.skip is not None:
            return self.config.skip
        warm = self.warmup_bursts(platform)
        return warm if warm is not None else self.config.bursts // 2

    def warmup_bursts(self, platform: Platform) -> int | None:
        cfg = self.config
        if cfg.mode != "periodic":
            return 0   # isolated, lockstep and coupled bursts start drained, local ones have no queue
        K, B = cfg.producers, cfg.bytes_per_producer
        Q = cfg.capacity_bytes or platform.capacity_bytes(K)
        t0, R = platform.issue_time0_us(K, B), platform.drain_rate_Bpus
        if platform.relaxing:
            return model_two_stage.relaxing_warmup_bursts(cfg.gap_us, t0, K * B, R, Q, **platform.queue_options(K))
        return model.warmup_bursts(cfg.gap_us, t0, K * B, R, Q)

    def steady(self, platform: Platform | None = None) -> pd.DataFrame:
        """Rows of the bursts the summary reports (from ``skip``; without a platform: ``config.skip`` or
        the second half, the old rule, kept for callers that have no platform at hand)."""
        n = self.config.bursts
        lo = self.skip(platform) if platform is not None else (self.config.skip or n // 2)
        return self.bursts[self.bursts["burst"] >= min(lo, n - 2)]

    def _medians(self, lo: int) -> tuple[float, float]:
        n = self.config.bursts
        if self.per_burst is not None:
            d = self.per_burst
            return float(np.median(d["issue"][min(lo, n - 1):])), float(np.median(d["period"][min(lo, n - 2):-1]))
        b = self.bursts
        return (float(b.loc[b["burst"] >= min(lo, n - 1), "issue(us)"].median()),
                float(b.loc[b["burst"] >= min(lo, n - 2), "period(us)"].median()))

    def summary(self, platform: Platform) -> dict:
        cfg = self.config
        volume = cfg.producers * cfg.bytes_per_producer
        t0 = platform.issue_time0_us(cfg.producers, cfg.bytes_per_producer)
        R = platform.drain_rate_Bpus
        Q = cfg.capacity_bytes or platform.capacity_bytes(cfg.producers)
        mode, gap = ("isolated", 0.0) if cfg.mode == "lockstep" else (cfg.mode, cfg.gap_us)
        pred, period = model_two_stage.steady_issue_and_period(mode, gap, t0, volume, R, Q,
                                               **(platform.queue_options(cfg.producers) if cfg.mode != "local" else {}))
        if cfg.mode == "lockstep":    # isolated issue; the barrier overlaps the drain (period at G = 0: drained)
            period = max(period, pred + cfg.barrier_us) + cfg.gap_us
        warm, skip = self.warmup_bursts(platform), self.skip(platform)
        t_iss, per = self._medians(skip)
        return {
            "platform": self.platform,
            **{k: v for k, v in asdict(cfg).items() if (k not in _ORDER_KEYS or cfg.drain_order != "fair")
               and (k != _BARRIER_KEY or cfg.mode == "lockstep")},
            "skip": skip, "engine": self.engine,
            "T_iss_us": t_iss,
            "period_us": per,
            "model_T_iss_us": pred,
            "model_period_us": period,
            "steady": bool(warm <= skip <= cfg.bursts - 2) if warm is not None else None,
            "warmup_bursts": warm,
            "bursts_needed": warm + 2 if warm is not None else None,   # the warm-up, one burst, the next start
            "drained_us": self.drained_us,
            "T_iss0_us": t0,
            "peak_queue_MiB": self.peak_queue_bytes / 2**20,
            "Q_MiB": Q / 2**20,
            "producer_bursts": cfg.producers * cfg.bursts,
            "bursts_per_s": cfg.producers * cfg.bursts / self.wall_s if self.wall_s > 0 else float("inf"),
        }


def _frame(cfg, platform_name, target, start, end_minus_start, period) -> pd.DataFrame:
    K, n = start.shape
    return pd.DataFrame({
        "source": "sim",
        "platform": platform_name,
        "target": target,
        "mode": cfg.mode,
        "producers": K,
        "bytes_per_producer": int(cfg.bytes_per_producer),
        "gap(us)": cfg.gap_us,
        "producer": np.repeat(np.arange(K), n),
        "burst": np.tile(np.arange(n), K),
        "start(us)": start.ravel(),
        "issue(us)": end_minus_start.ravel(),
        "period(us)": period.ravel(),
    })


def simulate_bursts(platform: Platform, config: BurstConfig, *, record_occupancy: bool = True) -> BurstResult:
    """Run one burst experiment; deterministic (no randomness). The exact engine keeps no occupancy log."""
    cfg = config
    platform.check_producers(cfg.producers)
    if platform.relaxing and (cfg.engine == "exact" or cfg.queue == "chunked"):
        field, value = ("engine", cfg.engine) if cfg.engine == "exact" else ("queue", cfg.queue)
        raise InputError(field, value, f"has no relaxing capacity ({platform.name!r}): use simpy, fluid queue")
    if cfg.resolved_engine == "exact" and not platform.relaxing:
        return _simulate_exact(platform, cfg)
    if cfg.producers * cfg.bursts > SIMPY_MAX_PRODUCER_BURSTS:
        raise InputError("bursts", cfg.bursts, f"times {cfg.producers} producers is {cfg.producers * cfg.bursts:,} "
                         f"producer-bursts, over the simpy engine's bound of {SIMPY_MAX_PRODUCER_BURSTS:,} "
                         "(memory); use engine exact")
    return _simulate_simpy(platform, cfg, record_occupancy)


def _simulate_exact(platform: Platform, cfg: BurstConfig) -> BurstResult:
    K, B = cfg.producers, float(cfg.bytes_per_producer)
    Q = cfg.capacity_bytes or platform.capacity_bytes(K)
    wall = time.perf_counter()
    d = uniform_bursts(cfg.mode, cfg.bursts, platform.issue_time0_us(K, B), K * B, platform.drain_rate_Bpus, Q,
                       cfg.gap_us, barrier=cfg.barrier_us or 0.0)
    wall = time.perf_counter() - wall
    return BurstResult(cfg, platform, per_burst=d, peak_queue_bytes=d["peak"], drained_us=d["drained_us"],
                       wall_s=wall, engine="exact")


def _simulate_simpy(platform: Platform, cfg: BurstConfig, record_occupancy: bool) -> BurstResult:
    K, B, n = cfg.producers, float(cfg.bytes_per_producer), cfg.bursts
    # a zero issue time (a burst inside the store buffer, no fixed time: a fitted free-running law can say so) is
    # issued in MIN_ISSUE_US, far below any timer's resolution, so the issue rate stays finite
    t0 = max(platform.issue_time0_us(K, B), MIN_ISSUE_US)
    rate = B / t0
    env = simpy.Environment()
    queue = None
    if cfg.mode != "local":
        Q = cfg.capacity_bytes or platform.capacity_bytes(K)
        kwargs = dict(coupled=cfg.mode == "coupled", record=record_occupancy)
        if cfg.queue == "fluid":
            queue = FluidXStage(env, platform.drain_rate_Bpus, Q, **kwargs, drain_order=cfg.drain_order,
                                **platform.queue_options(K))
        else:
            queue = ChunkedXStage(env, platform.drain_rate_Bpus, Q, chunk_bytes=cfg.chunk_bytes, **kwargs)
    start = [[0.0] * n for _ in range(K)]
    end = [[0.0] * n for _ in range(K)]
    gap = cfg.gap_us
    done = [0]
    weight = cfg.weights()

    def producer(p):
        starts, ends = start[p], end[p]
        if queue is None:
            for b in range(n):
                starts[b] = env.now
                yield env.timeout(t0)
                ends[b] = env.now
                if gap > 0:
                    yield env.timeout(gap)
        elif isinstance(queue, FluidXStage):
            issue, w = queue.issue, weight[p]
            for b in range(n):
                starts[b] = env.now
                ends[b] = yield issue(B, rate, gap, w)
        else:
            for b in range(n):
                starts[b] = env.now
                yield queue.issue(B, rate)
                ends[b] = env.now
                if gap > 0:
                    yield env.timeout(gap)
        done[0] += n

    def isolated():
        for b in range(n):
            t = env.now
            events = ([queue.issue(B, rate, 0.0, weight[p]) for p in range(K)] if isinstance(queue, FluidXStage)
                      else [queue.issue(B, rate) for _ in range(K)])
            yield env.all_of(events)
            for p in range(K):
                start[p][b] = t
                end[p][b] = env.now if isinstance(queue, ChunkedXStage) else events[p].value
            done[0] += K
            issue_end = env.now
            yield queue.when_empty()
            if cfg.mode == "lockstep" and issue_end + cfg.barrier_us > env.now:   # the barrier overlaps the drain
                yield env.timeout(issue_end + cfg.barrier_us - env.now)
            if gap > 0:
                yield env.timeout(gap)

    wall = time.perf_counter()
    if cfg.mode in ("isolated", "lockstep"):
        env.process(isolated())
    else:
        for p in range(K):
            env.process(producer(p))
    env.run()
    wall = time.perf_counter() - wall
    if done[0] != K * n:
        raise RuntimeError(f"simulation stalled: {done[0]} of {K * n} producer-bursts finished")

    start, end = np.array(start), np.array(end)
    period = np.full((K, n), np.nan)
    period[:, :-1] = np.diff(start, axis=1)
    frame = _frame(cfg, platform.name, platform.target if cfg.mode != "local" else "local", start, end - start,
                   period)
    occ = None
    if queue is not None and queue.log is not None:
        t, lvl, adm, drn = queue.log
        occ = pd.DataFrame({"time(us)": t, "queue(bytes)": lvl, "issued(bytes)": adm, "drained(bytes)": drn})
    if queue is None:
        drained = float(end.max())
    elif isinstance(queue, FluidXStage):
        drained = queue.idle_since
    else:
        drained = float(queue.log[0][-1]) if queue.log is not None and queue.log[0] else float("nan")
    peak = queue.peak_level if queue is not None else 0.0
    return BurstResult(cfg, platform, frame=frame, occupancy=occ, peak_queue_bytes=peak, drained_us=drained,
                       wall_s=wall, engine="simpy")
