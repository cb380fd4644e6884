"""Burst experiments on the simulated X-Stage (the paper's Sec. 3.1 microbenchmarks).

Modes:
    periodic   K producers repeat: issue B bytes, then a producer-side gap G.
    isolated   every burst starts from an empty X-Stage: all producers issue once, the queue drains
               completely, then G, then the next burst.
    local      the local-memory control: no X-Stage, every issue takes T_iss0.
    coupled    completion-coupled counterfactual: an issuer resumes only once its bytes drained.
"""

import time
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import simpy

from xstage.errors import InputError, require_int, require_positive
from xstage.sim import model
from xstage.sim.platform import Platform
from xstage.sim.xqueue import ChunkedXStage, FluidXStage

MODES = ("periodic", "isolated", "local", "coupled")


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


@dataclass
class BurstResult:
    config: BurstConfig
    platform: str
    bursts: pd.DataFrame       # burst record schema (xstage.records COLUMNS["burst"])
    occupancy: pd.DataFrame    # time(us), queue(bytes), issued(bytes), drained(bytes)
    peak_queue_bytes: float
    wall_s: float

    def steady(self) -> pd.DataFrame:
        """Rows of the second half of the bursts (steady state)."""
        return self.bursts[self.bursts["burst"] >= self.config.bursts // 2]

    def summary(self, platform: Platform) -> dict:
        cfg = self.config
        steady = self.steady()
        volume = cfg.producers * cfg.bytes_per_producer
        t0 = platform.issue_time0_us(cfg.producers, cfg.bytes_per_producer)
        R = platform.drain_rate_Bpus
        Q = cfg.capacity_bytes or platform.capacity_bytes(cfg.producers)
        pred, period = _model_issue_and_period(cfg.mode, cfg.gap_us, t0, volume, R, Q)
        return {
            "platform": self.platform,
            **{k: v for k, v in asdict(cfg).items()},
            "T_iss_us": float(steady["issue(us)"].median()),
            "period_us": float(steady["period(us)"].median()),
            "model_T_iss_us": pred,
            "model_period_us": period,
            "T_iss0_us": t0,
            "peak_queue_MiB": self.peak_queue_bytes / 2**20,
            "Q_MiB": Q / 2**20,
            "producer_bursts": cfg.producers * cfg.bursts,
            "bursts_per_s": cfg.producers * cfg.bursts / self.wall_s if self.wall_s > 0 else float("inf"),
        }


def _model_issue_and_period(mode, G, t0, V, R, Q) -> tuple[float, float]:
    """The exact steady-state closed forms of ``xstage.sim.model`` for one mode."""
    if mode == "isolated":
        return model.isolated_issue_time_us(t0, V, R, Q), model.isolated_period_us(G, t0, V, R)
    if mode == "local":
        return t0, t0 + G
    if mode == "coupled":
        return model.coupled_issue_time_us(t0, V, R), model.coupled_period_us(G, V, R, t0)
    return model.issue_time_with_capacity_us(G, t0, V, R, Q), model.periodic_period_us(G, t0, V, R, Q)


def simulate_bursts(platform: Platform, config: BurstConfig, *, record_occupancy: bool = True) -> BurstResult:
    """Run one burst experiment; deterministic (no randomness)."""
    cfg = config
    platform.check_producers(cfg.producers)
    K, B, n = cfg.producers, float(cfg.bytes_per_producer), cfg.bursts
    t0 = platform.issue_time0_us(K, B)
    rate = B / t0
    env = simpy.Environment()
    queue = None
    if cfg.mode != "local":
        Q = cfg.capacity_bytes or platform.capacity_bytes(K)
        kwargs = dict(coupled=cfg.mode == "coupled", record=record_occupancy)
        if cfg.queue == "fluid":
            queue = FluidXStage(env, platform.drain_rate_Bpus, Q, **kwargs)
        else:
            queue = ChunkedXStage(env, platform.drain_rate_Bpus, Q, chunk_bytes=cfg.chunk_bytes, **kwargs)
    start = [[0.0] * n for _ in range(K)]
    end = [[0.0] * n for _ in range(K)]
    gap = cfg.gap_us
    done = [0]

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
            issue = queue.issue
            for b in range(n):
                starts[b] = env.now
                ends[b] = yield issue(B, rate, gap)
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
            events = [queue.issue(B, rate) for _ in range(K)]
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
    frame = pd.DataFrame({
        "source": "sim",
        "platform": platform.name,
        "target": platform.target if cfg.mode != "local" else "local",
        "mode": cfg.mode,
        "producers": K,
        "bytes_per_producer": int(B),
        "gap(us)": gap,
        "producer": np.repeat(np.arange(K), n),
        "burst": np.tile(np.arange(n), K),
        "start(us)": start.ravel(),
        "issue(us)": (end - start).ravel(),
        "period(us)": period.ravel(),
    })
    if queue is not None and queue.log is not None:
        t, lvl, adm, drn = queue.log
        occ = pd.DataFrame({"time(us)": t, "queue(bytes)": lvl, "issued(bytes)": adm, "drained(bytes)": drn})
    else:
        occ = pd.DataFrame(columns=["time(us)", "queue(bytes)", "issued(bytes)", "drained(bytes)"])
    peak = queue.peak_level if queue is not None else 0.0
    return BurstResult(cfg, platform.name, frame, occ, peak, wall)
