"""Fused-kernel replay: a schedule's tiles run on SMs that share one X-Stage (the paper's Sec. 4.2).

Each program (SM) has two roles walking its tile order:
    MMA role       runs mainloops in order. Tile j starts once (a) the previous mainloop ended,
                   (b) for an L2 tile, the l2_full counter of its row counts all L1 tiles of that
                   row (their epilogues ended, on any SM), (c) a staging slot is free: the epilogue of
                   tile j - S ended, S = max(staging_slots, 1). S = 2 is the paper's double-buffered
                   accumulator; 0 (or 1) puts the epilogue in series with the mainloop. With
                   ``cover_us`` > 0 the mainloop may run that long before it needs the slot (the
                   FlashAttention-4 one-QK^T cover window of Eq. 17/19).
    epilogue role  takes tiles in order once their mainloop ended. A tile with remote bytes spends
                   ``remote_epilogue_us`` (accumulator read, conversion, addresses: the fixed staging
                   overhead of the paper's T_RS floor), then issues its bytes into the GPU's shared
                   ``FluidXStage`` at the backpressure-free rate B / T_iss0(K, B); the epilogue ends
                   when the sender sees the issue end (``coupled``: when the bytes drained, plus
                   ``completion_latency_us`` -- the completion-coupled counterfactual). A tile without
                   remote bytes (L1) writes locally in ``local_epilogue_us``. With ``sm_pool_GBps`` the
                   SMs' stores share one aggregate rate: an issue that starts while n others are issuing
                   gets at most pool / (n + 1) for its whole issue (the per-SM rate depends on how many SMs
                   store at once; the count is taken at the issue's start, so the two engines may order
                   same-instant starts differently).
Per tile it records mainloop start/end, epilogue (remote-store span) start/end, the MMA's wait for
a staging slot (``mma_stall``) and for the l2_full counter (``dep_wait``).

Two engines give the same answer: ``simpy`` (processes on ``xstage.sim.xqueue.FluidXStage``, the
reference) and ``fast`` (one heap-driven loop with the same fluid queue inlined; the default).
"""

import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from xstage.errors import InputError, require_int, require_positive
from xstage.sim.platform import Platform
from xstage.sim.schedules import KIND_L1, KIND_L2, KIND_NAMES, Schedule


@dataclass(frozen=True)
class ReplayConfig:
    staging_slots: int = 2
    coupled: bool = False
    completion_latency_us: float = 0.0
    local_epilogue_us: float = 0.3
    remote_epilogue_us: float = 0.5
    cover_us: float = 0.0
    producers: int | None = None       # K in T_iss0(K, B); default: the schedule's programs
    engine: str = "fast"               # fast | simpy
    record_occupancy: bool = True
    sm_pool_GBps: float | None = None  # the SMs' stores share this rate: an issue that starts while n others
                                       # issue gets at most pool / (n + 1) (None: each its own rate)

    def __post_init__(self):
        object.__setattr__(self, "staging_slots", require_int("staging_slots", self.staging_slots, minimum=0))
        for name in ("completion_latency_us", "local_epilogue_us", "remote_epilogue_us", "cover_us"):
            require_positive(name, getattr(self, name), allow_zero=True)
        if self.producers is not None:
            object.__setattr__(self, "producers", require_int("producers", self.producers))
        if self.sm_pool_GBps is not None:
            require_positive("sm_pool_GBps", self.sm_pool_GBps)
        if self.engine not in ("fast", "simpy"):
            raise InputError("engine", self.engine, "must be fast or simpy")


@dataclass
class ReplayResult:
    schedule: str
    platform: str
    config: ReplayConfig
    arrays: dict            # per tile, in schedule order: see _COLUMNS
    makespan_us: float      # last epilogue end (sender-visible kernel end)
    drain_end_us: float     # the X-Stage is empty again
    peak_queue_bytes: float
    occupancy: pd.DataFrame  # time(us), queue(bytes)
    num_sms: int
    wall_s: float

    def tiles(self, *, experiment: str = "replay", config: str = "", source: str = "sim") -> pd.DataFrame:
        """One row per tile in the "tile" record schema (plus row, dep_wait(us), span(us))."""
        a = self.arrays
        frame = pd.DataFrame({
            "source": source, "platform": self.platform, "experiment": experiment, "config": config,
            "schedule": self.schedule, "sm": a["sm"], "seq": a["seq"],
            "kind": pd.Categorical.from_codes(a["kind"], categories=[KIND_NAMES[k] for k in sorted(KIND_NAMES)]),
            "expert": a["expert"], "m": a["m"], "n": a["n"], "bytes_remote": a["bytes"],
            "mainloop_start(us)": a["ml_start"], "mainloop_end(us)": a["ml_end"],
            "issue_start(us)": a["epi_start"], "issue_end(us)": a["epi_end"],
            "mma_stall(us)": a["stall"], "row": a["row"], "dep_wait(us)": a["dep_wait"],
        })
        frame["span(us)"] = frame["issue_end(us)"] - frame["issue_start(us)"]
        return frame

    def kernel(self, *, experiment: str = "replay", config: str = "", variant: str | None = None) -> pd.DataFrame:
        """One row in the "kernel" record schema: the replay's makespan as a single deterministic trial."""
        return pd.DataFrame([{"source": "sim", "experiment": experiment, "config": config,
                              "variant": variant or self.schedule, "time(us)": self.makespan_us, "trials": 1,
                              "platform": self.platform, **self.summary()}]).drop(columns=["schedule"])

    def spans_us(self, kind: int = KIND_L2) -> np.ndarray:
        a = self.arrays
        sel = (a["kind"] == kind) & (a["bytes"] > 0)
        return (a["epi_end"] - a["epi_start"])[sel]

    def activity(self, bins: int = 200) -> pd.DataFrame:
        """Tensor-Core activity: mean fraction of SMs inside a mainloop, per time bin."""
        a = self.arrays
        busy_end = a["ml_end"]
        busy_start = busy_end - a["mainloop_us"]
        return _busy_fraction(busy_start, busy_end, self.num_sms, self.makespan_us, bins)

    def summary(self) -> dict:
        a = self.arrays
        l2 = a["bytes"] > 0
        spans = self.spans_us(KIND_L2) if np.any(a["kind"] == KIND_L2) else (a["epi_end"] - a["epi_start"])[l2]
        busy = float(np.sum(a["mainloop_us"]))
        return {
            "schedule": self.schedule, "makespan_us": self.makespan_us, "drain_end_us": self.drain_end_us,
            "tiles": int(len(a["kind"])), "remote_bytes": float(np.sum(a["bytes"])),
            "span_median_us": float(np.median(spans)) if len(spans) else math.nan,
            "span_p90_us": float(np.percentile(spans, 90)) if len(spans) else math.nan,
            "mma_stall_total_us": float(np.sum(a["stall"])),
            "mma_stall_per_sm_us": float(np.sum(a["stall"])) / self.num_sms,
            "dep_wait_per_sm_us": float(np.sum(a["dep_wait"])) / self.num_sms,
            "tensor_activity": busy / (self.num_sms * self.makespan_us) if self.makespan_us > 0 else math.nan,
            "peak_queue_MiB": self.peak_queue_bytes / 2**20,
        }


def _busy_fraction(start, end, num_sms, horizon, bins) -> pd.DataFrame:
    edges = np.linspace(0.0, max(horizon, 1e-9), bins + 1)
    # integral of "SMs busy" over [0, x] is sum over tiles of clip(x - start, 0, end - start)
    order_s, order_e = np.sort(start), np.sort(end)
    cs, ce = np.concatenate([[0], np.cumsum(order_s)]), np.concatenate([[0], np.cumsum(order_e)])

    def integral(x):
        ns = np.searchsorted(order_s, x, side="right")
        ne = np.searchsorted(order_e, x, side="right")
        return (ns * x - cs[ns]) - (ne * x - ce[ne])

    area = np.diff(integral(edges))
    width = np.diff(edges)
    return pd.DataFrame({"time(us)": edges[:-1], "width(us)": width,
                         "tensor_active": np.clip(area / (width * num_sms), 0.0, 1.0)})  # float noise


def replay(schedule: Schedule, mainloop_us, remote_bytes, platform: Platform,
           config: ReplayConfig = ReplayConfig(), cover_per_tile_us=None) -> ReplayResult:
    """Replay ``schedule`` with per-tile mainloop times and remote bytes (arrays in schedule order).

    ``cover_per_tile_us`` (optional, schedule order): how long each tile's mainloop may run before it needs
    its staging slot, a per-tile ``cover_us`` (the larger of the two counts): a kernel whose SM waits for the
    previous store only at a later point of the next mainloop (``sim.predict``'s ``hold``). None: ``cover_us``."""
    T = len(schedule.tiles)
    ml = np.asarray(mainloop_us, dtype=float).reshape(-1)
    nbytes = np.asarray(remote_bytes, dtype=float).reshape(-1)
    if ml.shape != (T,) or nbytes.shape != (T,):
        raise InputError("mainloop_us/remote_bytes", (ml.shape, nbytes.shape), f"must both have {T} entries")
    if T and (not np.all(np.isfinite(ml)) or ml.min() < 0):
        raise InputError("mainloop_us", float(ml.min()), "must be finite and >= 0")
    if T and nbytes.min() < 0:
        raise InputError("remote_bytes", float(nbytes.min()), "must be >= 0")
    if cover_per_tile_us is not None:
        cover = np.asarray(cover_per_tile_us, dtype=float).reshape(-1)
        if cover.shape != (T,) or (T and (not np.all(np.isfinite(cover)) or cover.min() < 0)):
            raise InputError("cover_per_tile_us", cover.shape, f"must have {T} finite entries >= 0")
    K = config.producers or schedule.num_sms
    platform.check_producers(K)
    from xstage.sim.replay_engines import run_fast, run_simpy
    wall = time.perf_counter()
    run = run_fast if config.engine == "fast" else run_simpy
    out, extras = run(schedule, ml, nbytes, platform, config, K, cover_per_tile_us)
    wall = time.perf_counter() - wall
    stuck = np.isnan(out["epi_end"])
    if np.any(stuck):
        first = int(np.argmax(stuck))
        t = schedule.tiles[first]
        field, value = ("lead_rows (D)", schedule.params["lead_rows"]) if "lead_rows" in schedule.params \
            else ("schedule", schedule.name)
        raise InputError(field, value, f"deadlocks: program {t[4]} never finishes its tile {int(t[5])} "
                         f"({KIND_NAMES[int(t[0])]} row {int(t[6])}); an L2 tile waits on L1 tiles that "
                         "come after it (Algorithm 1 needs D >= 1)")
    cols = schedule.tiles
    arrays = {"kind": cols[:, 0], "expert": cols[:, 1], "m": cols[:, 2], "n": cols[:, 3], "sm": cols[:, 4],
              "seq": cols[:, 5], "row": cols[:, 6], "bytes": nbytes, "mainloop_us": ml, **out}
    occ = pd.DataFrame({"time(us)": extras["occ_t"], "queue(bytes)": extras["occ_q"]})
    makespan = float(np.max(arrays["epi_end"])) if T else 0.0
    return ReplayResult(schedule.name, platform.name, config, arrays, makespan, float(extras["drain_end"]),
                        float(extras["peak"]), occ, schedule.num_sms, wall)


__all__ = ["ReplayConfig", "ReplayResult", "replay", "KIND_L1", "KIND_L2"]
