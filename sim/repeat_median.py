"""A calibration grid measured more than once, fitted on its point-wise median (``xstage calibrate --repeat N``,
or ``--refit --records A --median-with B``; docs/calibration/knee21.md).

Why: on the H200's host path a burst near the knee (V - R T_iss0 ~ Q(K)) is caught by backpressure in one run and
not in the next, so a small grid's own-split refit passes or fails on which run was fitted and judged (knee18,
knee20). Measured twice and fitted on the point-wise median, ``two-stage-lockq`` met the held-out host target on a
grid nobody had measured (``fresh13``, pre-registered: all four checks at 5 of 5 ``bracket`` seeds; session 17).

Matching: the runs' points are matched on (phase, mode, gap kind, K, B, step), step the n-th point of its (phase,
mode, gap kind, K, B) in record order -- not on the requested gap, which each run sets from its own zero-gap period
(they differ by ~1 %). Every measured column is the median over the runs that hold the point with a T_iss > 0 (two
runs: their mean); a point in one run only keeps that run's values; the design columns must agree. Pure: frames in,
frames out.
"""
import pandas as pd

from xstage.errors import InputError

MATCH = ["phase", "mode", "gap_kind", "producers", "bytes_per_producer"]   # + "step"
MEASURED = ("gap(us)", "T_iss(us)", "period(us)", "gap_measured(us)", "fence(us)", "T_iss_producer(us)",
            "kernel(GBps)", "T_iss_spread")


def with_step(points: pd.DataFrame) -> pd.DataFrame:
    """``points`` with ``step``: the n-th point of its (phase, mode, gap kind, K, B) in record order."""
    return points.assign(step=points.groupby(MATCH, dropna=False, sort=False).cumcount())


def median_run(runs: dict, field: str = "runs") -> tuple:
    """The point-wise median of the runs ({name: points}): (points, info). Points are matched on ``MATCH`` + step;
    each ``MEASURED`` column is the median over the runs holding the point with a T_iss > 0 (a run with a missing or
    non-positive T_iss does not hold it); design columns are the first holding run's and must agree (else an
    ``InputError`` on ``field``). A point in one run only keeps that run's values. ``info``: points per run, points
    held (T_iss > 0) by every run, by one run only. The median frame has the first run's columns plus ``n_runs``
    (the runs holding each point)."""
    if not runs:
        raise InputError(field, 0, "needs >= 1 run")
    parts = []
    for name, pts in runs.items():
        p = with_step(pts.reset_index(drop=True)).assign(_run=name)
        p["_valid"] = p["T_iss(us)"].notna() & (p["T_iss(us)"] > 0)
        parts.append(p)
    every = pd.concat(parts, ignore_index=True)
    key = MATCH + ["step"]
    measured = [c for c in MEASURED if c in every]
    design = [c for c in every.columns if c not in measured and c not in key and c not in ("_run", "_valid")]
    for c in design:
        n = every.groupby(key, dropna=False, sort=False)[c].nunique(dropna=False)
        if (n > 1).any():
            raise InputError(field, list(runs), f"must be runs of one grid: design column {c!r} differs between "
                             f"runs at {int((n > 1).sum())} points")
    valid = every[every["_valid"]]
    med = valid.groupby(key, dropna=False, sort=False)[measured].median()
    base = every.groupby(key, dropna=False, sort=False).first()          # design columns; measured where none valid
    held = every[every["_valid"]].groupby(key, dropna=False, sort=False)["_run"].nunique()
    out = base.copy()
    out.loc[med.index, measured] = med
    out["n_runs"] = held.reindex(out.index).fillna(0).astype(int)
    out = out.reset_index()[list(runs[next(iter(runs))].columns) + ["step", "n_runs"]]
    info = {"points_per_run": {n: int(len(p)) for n, p in runs.items()}, "points": int(len(out)),
            "in_every_run": int((out["n_runs"] == len(runs)).sum()),
            "in_one_run_only": int((out["n_runs"] == 1).sum()) if len(runs) > 1 else 0}
    return out.drop(columns=["step"]), info
