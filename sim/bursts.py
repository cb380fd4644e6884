"""Burst experiments on the simulated X-Stage (the paper's Sec. 3.1 microbenchmarks).

Modes:
    periodic   K producers repeat: issue B bytes, then a producer-side gap G.
    isolated   every burst starts from an empty X-Stage: all producers issue once, the queue drains
               completely, then G, then the next burst.
    local      the local-memory control: no X-Stage, every issue takes T_iss0.
    coupled    completion-coupled counterfactual: an issuer resumes only once its bytes drained.

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
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import simpy

from xstage.errors import InputError, require_int, require_positive
from xstage.sim import model, model_two_stage
from xstage.sim.bursts_exact import uniform_bursts
from xstage.sim.platform import Platform
from xstage.sim.xqueue import DRAIN_ORDERS, ChunkedXStage, FluidXStage

MODES = ("periodic", "isolated", "local", "coupled")
ENGINES = ("auto", "exact", "simpy")
SIMPY_MAX_PRODUCER_BURSTS = 5_000_000   # ~1.5 GB of Python state and records; the exact engine has no bound


@dataclass(frozen=True)
class BurstConfig:
    producers: int
    bytes_per_producer: int
    gap_us: float
    bursts: int = 200
    mode: str = "periodic"
    queue: str = "fluid"          # fluid | chunked
    chunk_bytes: int = 4096
    capacity_bytes: float | None = None  # override Q(K) (used by calibration sweeps)
    skip: int | None = None       # bursts left out of the summary medians; None: the warm-up (steady-state rule)
    engine: str = "auto"          # auto | exact | simpy
    drain_order: str = "fair"     # fair | ordered (fixed per-producer shares; simpy fluid queue only)
    drain_spread: float | None = None   # ordered: a in w_p = exp(-a p / (K - 1)); required there, else None

    def __post_init__(self):
        object.__setattr__(self, "producers", require_int("producers", self.producers))
        require_positive("bytes_per_producer", self.bytes_per_producer)
        require_positive("gap_us", self.gap_us, allow_zero=True)
        object.__setattr__(self, "bursts", require_int("bursts", self.bursts, minimum=2))
        if self.mode not in MODES:
            raise InputError("mode", self.mode, f"must be one of {', '.join(MODES)}")
        if self.queue not in ("fluid", "chunked"):
            raise InputError("queue", self.queue, "must be fluid or chunked")
        require_positive("chunk_bytes", self.chunk_bytes)
        if self.capacity_bytes is not None:
            require_positive("capacity_bytes", self.capacity_bytes)
        if self.skip is not None:
            skip = require_int("skip", self.skip, minimum=0)
            if skip > self.bursts - 2:
                raise InputError("skip", self.skip, f"must leave at least 2 of the {self.bursts} bursts (<= "
                                 f"{self.bursts - 2})")
            object.__setattr__(self, "skip", skip)
        if self.engine not in ENGINES:
            raise InputError("engine", self.engine, f"must be one of {', '.join(ENGINES)}")
        if self.engine == "exact" and self.queue != "fluid":
            raise InputError("engine", self.engine, "needs queue fluid (the chunked queue runs on simpy)")
        if self.drain_order not in DRAIN_ORDERS:
            raise InputError("drain_order", self.drain_order, f"must be one of {', '.join(DRAIN_ORDERS)}")
        if self.drain_order == "fair":
            if self.drain_spread is not None:
                raise InputError("drain_spread", self.drain_spread, "applies to drain_order ordered only")
        else:
            if self.drain_spread is None:
                raise InputError("drain_spread", None, "is required with drain_order ordered (a >= 0)")
            require_positive("drain_spread", self.drain_spread, allow_zero=True)
            object.__setattr__(self, "drain_spread", float(self.drain_spread))
            if self.engine == "exact" or self.queue != "fluid":
                field, value = ("engine", self.engine) if self.engine == "exact" else ("queue", self.queue)
                raise InputError(field, value, "has no drain order ordered: use engine simpy, queue fluid")

    @property
    def resolved_engine(self) -> str:
        if self.engine != "auto":
            return self.engine
        return "exact" if self.queue == "fluid" and self.drain_order == "fair" else "simpy"

    def weights(self) -> list[float]:
        """Each producer's share of the drain while held back (all 1 for ``fair``)."""
        K = self.producers
        if self.drain_order == "fair":
            return [1.0] * K
        return [float(np.exp(-self.drain_spread * p / max(K - 1, 1))) for p in range(K)]


_ORDER_KEYS = ("drain_order", "drain_spread")   # in summaries only when not the default (keys unchanged)
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
            return 0   # isolated and coupled bursts start drained, local ones have no queue
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
        pred, period = model_two_stage.steady_issue_and_period(cfg.mode, cfg.gap_us, t0, volume, R, Q,
                                               **(platform.queue_options(cfg.producers) if cfg.mode != "local" else {}))
        warm, skip = self.warmup_bursts(platform), self.skip(platform)
        t_iss, per = self._medians(skip)
        return {
            "platform": self.platform,
            **{k: v for k, v in asdict(cfg).items() if k not in _ORDER_KEYS or cfg.drain_order != "fair"},
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
                       cfg.gap_us)
    wall = time.perf_counter() - wall
    return BurstResult(cfg, platform, per_burst=d, peak_queue_bytes=d["peak"], drained_us=d["drained_us"],
                       wall_s=wall, engine="exact")


def _simulate_simpy(platform: Platform, cfg: BurstConfig, record_occupancy: bool) -> BurstResult:
    K, B, n = cfg.producers, float(cfg.bytes_per_producer), cfg.bursts
    t0 = platform.issue_time0_us(K, B)
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
            yield queue.when_empty()
            if gap > 0:
                yield env.timeout(gap)

    wall = time.perf_counter()
    if cfg.mode == "isolated":
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
