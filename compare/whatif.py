"""A precomputed grid of model and simulator results for the what-if explorer.

The explorer's sliders pick K (producers), B (bytes per producer), G (gap), R (drain rate) and
Q (outstanding capacity); everything they can show is computed here, so the page only looks values
up. For every (K, B, R, Q):

- ``periodic``: at every G of the grid, the simulator's and the model's T_iss and period, with
  T_iss0, V/R, G*, q_peak^0, the two Eq. 10 design bounds and the isolated-burst issue time of
  Eq. 7 (the floor a finite Q puts under T_iss, which Eq. 3 alone does not see);
- ``model_periodic``: the model's exact piecewise-linear curves vs G (their breakpoints), and the
  completion-coupled period G + V/R;
- ``isolated``: the isolated-burst issue time vs B for (K, R, Q) -- model curve and simulator points.

Symmetry reduction (exact): K producers that start together with equal B and rate behave, in the
fluid X-Stage, like one producer issuing K*B bytes in T_iss0(K, B) -- a full queue slows every
producer by the same factor. The grid is simulated that way (one simpy producer per run), which
``tests/compare/test_compare_whatif.py`` checks against the K-producer run.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from xstage.errors import InputError
from xstage.sim import model
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import Platform
from xstage.units import KiB

MiB = 2**20


@dataclass(frozen=True)
class WhatIfGrid:
    producers: tuple
    bytes_per_producer: tuple
    gap_us: tuple
    drain_rate_GBps: tuple
    capacity_MiB: tuple
    bursts: int = 30

    def __post_init__(self):
        for name in ("producers", "bytes_per_producer", "gap_us", "drain_rate_GBps", "capacity_MiB"):
            values = tuple(getattr(self, name))
            if not values:
                raise InputError(f"whatif grid {name}", values, "must hold at least one value")
            if any(v < 0 or (v == 0 and name != "gap_us") for v in values):
                raise InputError(f"whatif grid {name}", values, "must be positive")
            object.__setattr__(self, name, tuple(sorted(values)))

    @property
    def size(self) -> int:
        return (len(self.producers) * len(self.bytes_per_producer) * len(self.drain_rate_GBps)
                * len(self.capacity_MiB))

    @classmethod
    def default(cls, p: Platform, small: bool = False) -> "WhatIfGrid":
        sm = p.sm_count
        q = p.capacity_bytes(sm) / MiB
        if small:
            return cls((max(1, sm // 2), sm), (16 * KiB, 64 * KiB), (0.0, 1.0, 4.0, 16.0),
                       (p.drain_rate_GBps / 2, p.drain_rate_GBps), (q / 4, q), bursts=16)
        return cls(tuple(sorted({max(1, sm // 8), max(1, sm // 4), max(1, sm // 2), sm})),
                   (8 * KiB, 16 * KiB, 32 * KiB, 64 * KiB),
                   (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0),
                   tuple(round(p.drain_rate_GBps * f, 3) for f in (0.25, 0.5, 1.0, 2.0)),
                   tuple(round(q * f, 4) for f in (0.25, 1.0, 4.0)))


def _aggregate(p: Platform, K: int, B: float, R_GBps: float) -> Platform:
    """One producer equivalent to K symmetric ones: issues K*B bytes in T_iss0(K, B)."""
    return dataclasses.replace(p, drain_rate_GBps=R_GBps, t_fixed_us=p.issue_time0_us(K, B),
                               producer_issue_GBps=1e15, injection_GBps=None, capacity_points=((1, 1.0),))


def simulate_symmetric(p: Platform, K: int, B: float, G: float, R_GBps: float, Q_bytes: float, mode: str,
                       bursts: int) -> tuple[float, float]:
    """Steady-state (T_iss, period) of K symmetric producers via the one-producer reduction."""
    agg = _aggregate(p, K, B, R_GBps)
    res = simulate_bursts(agg, BurstConfig(1, int(K * B), G, bursts=bursts, mode=mode, capacity_bytes=Q_bytes),
                          record_occupancy=False)
    steady = res.steady(agg)
    return float(steady["issue(us)"].median()), float(steady["period(us)"].median())


def whatif_frames(p: Platform, grid: WhatIfGrid | None = None, progress=None) -> dict:
    """The explorer's tables: ``periodic``, ``model_periodic``, ``isolated``, and the slider ``axes``."""
    grid = grid or WhatIfGrid.default(p)
    periodic, model_rows, isolated = [], [], []
    g_max = max(grid.gap_us)
    combos = [(K, B, R, Q) for K in grid.producers for B in grid.bytes_per_producer
              for R in grid.drain_rate_GBps for Q in grid.capacity_MiB]
    for K, B, R_GBps, Q_MiB in (progress(combos) if progress else combos):
        R, Q, V = R_GBps * 1e3, Q_MiB * MiB, K * B
        t0 = p.issue_time0_us(K, B)
        g_star = model.recovery_gap_us(t0, V, R)
        key = dict(producers=K, bytes_per_producer=B, **{"drain_rate(GBps)": R_GBps, "capacity(MiB)": Q_MiB})
        for g in sorted({0.0, min(g_star, g_max), g_max}):
            t_iss = model.issue_time_us(g, t0, V, R)
            model_rows.append({**key, "gap(us)": g, "issue(us)": t_iss, "period(us)": t_iss + g,
                               "coupled_period(us)": model.coupled_period_us(g, V, R)})
        for g in grid.gap_us:
            t_iss, period = simulate_symmetric(p, K, B, g, R_GBps, Q, "periodic", grid.bursts)
            test = model.design_test(g, t0, V, R, Q)
            periodic.append({**key, "gap(us)": g, "T_iss0(us)": t0, "V/R(us)": V / R, "G*(us)": g_star,
                            "model_issue(us)": model.issue_time_us(g, t0, V, R),
                            "model_period(us)": model.period_us(g, t0, V, R),
                            "q_peak0(MiB)": test.peak_outstanding_bytes / MiB,
                            "model_isolated_issue(us)": model.isolated_issue_time_us(t0, V, R, Q),
                            "rate_bound_ok": test.rate_bound_ok, "capacity_bound_ok": test.capacity_bound_ok,
                            "sim_issue(us)": t_iss, "sim_period(us)": period})
    for K in grid.producers:
        for R_GBps in grid.drain_rate_GBps:
            for Q_MiB in grid.capacity_MiB:
                R, Q = R_GBps * 1e3, Q_MiB * MiB
                key = dict(producers=K, **{"drain_rate(GBps)": R_GBps, "capacity(MiB)": Q_MiB})
                b_hi = max(4 * Q / K, max(grid.bytes_per_producer))
                for B in np.geomspace(1 * KiB, b_hi, 48):
                    t0 = p.issue_time0_us(K, B)
                    isolated.append({**key, "series": "model", "bytes_per_producer": float(B),
                                     "issue(us)": model.isolated_issue_time_us(t0, K * B, R, Q)})
                sim_b = {int(round(b / 16)) * 16 for b in np.geomspace(1 * KiB, b_hi, 8)} | set(grid.bytes_per_producer)
                for B in sorted(sim_b):
                    t_iss, _ = simulate_symmetric(p, K, float(B), 0.0, R_GBps, Q, "isolated", 2)
                    isolated.append({**key, "series": "sim", "bytes_per_producer": float(B), "issue(us)": t_iss})
    axes = {"producers": list(grid.producers), "bytes_per_producer": list(grid.bytes_per_producer),
            "gap(us)": list(grid.gap_us), "drain_rate(GBps)": list(grid.drain_rate_GBps),
            "capacity(MiB)": list(grid.capacity_MiB)}
    return {"periodic": pd.DataFrame(periodic), "model_periodic": pd.DataFrame(model_rows),
            "isolated": pd.DataFrame(isolated), "axes": axes,
            "platform": p.name}
