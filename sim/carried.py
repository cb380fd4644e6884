"""A committed platform on calibration points it never saw: does a platform fitted on one card (or one run) hold on
another?

``xstage calibrate --against PLATFORM`` asks this of a folder's points (``--records SRC``, nothing measured or
fitted) or of the run it has just measured. The platform predicts every point (``fit.model_check``) and issue 15's
four checks are read on every lockstep periodic point, since the platform saw none of them; the folder's recorded
held-out half is reported beside them, and every lockstep pair with a point off by more than ``MISS_LIMIT`` is listed
with its knee ratio under the platform (``heldout_misses``' table, over every pair).

What it measured (docs/calibration/h100-broad24.md). On the H200 the committed wide platforms carried to three broad
grids measured later (T_iss p90 8.6 / 10.2 / 14.2 %). On H100s a host platform pooled over two cards carried to a
third card's grids at p90 25.9 / 16.4 / 11.8 % (the third card's knee sits higher), while card 1's local platform
carried to the third card's local wide run at 4.77 / 10.80 %. Issue 15's targets are stated for held-out points of a
card's own calibration; this check is the one to run before trusting a platform on a card it was not measured on.

The drain rate is the one parameter to take from the card itself (``with_drain_rate``, ``--own-rate``). A lockstep
point held by the drain has T_iss = V/R - G with the measured gap G, a small difference of two large times, so its
predicted T_iss moves (V/R) / T_iss times as much as R does: up to 40-90 times on the knee grids, and H100 cards
differ in R by 0.2-0.4 %. Measured post hoc (session 27, docs/calibration/h100-broad24.md): pool24 missed 23 of 132
pairs far from the knee on two H100s whose R sits 0.35 % above its own, and 2 with each card's fitted R.
"""

import dataclasses

import numpy as np

from xstage.sim.fit import error_summary, model_check
from xstage.sim.heldout_misses import MISS_LIMIT, heldout_misses, meets_targets, periodic_pairs

KEYS = ("median_rel_err_T_iss", "p90_rel_err_T_iss", "median_rel_err_period", "p90_rel_err_period", "n_points")


def with_drain_rate(platform, rate_GBps: float):
    """``platform`` with its drain rate R set to ``rate_GBps``; a separate free-running R (``free_drain_rate_GBps``)
    is scaled by the same factor. Everything else (issue law, capacity, relaxation) is carried unchanged."""
    scale = rate_GBps / platform.drain_rate_GBps
    free = None if platform.free_drain_rate_GBps is None else platform.free_drain_rate_GBps * scale
    return dataclasses.replace(platform, drain_rate_GBps=float(rate_GBps), free_drain_rate_GBps=free)


def _figures(check) -> dict:
    errs = error_summary(check)
    return {k: errs.get(k) for k in KEYS}


def carried(points, platform) -> dict:
    """``platform`` (a ``Platform``) on every point of ``points`` (a calibration folder's points.parquet frame):
    ``every_point`` figures and the verdict on them (``meets``: issue 15's four checks; None without a lockstep
    periodic point), ``heldout_half`` (the points the folder's own split held out; absent without a split),
    ``n_pairs`` (lockstep periodic pairs) and ``misses``: every lockstep pair with a point off by more than
    ``MISS_LIMIT``, worst |median| first (``heldout_misses``' rows, over every pair rather than the held-out ones)."""
    points = points.reset_index(drop=True)
    check = model_check(points, platform)
    split = points["split"].astype(str).to_numpy() if "split" in points else np.full(len(check), "fit")
    every = _figures(check)
    out = {"platform": platform.name, "every_point": every,
           "meets": meets_targets({f"heldout_{k}": v for k, v in every.items()})}
    if (split == "heldout").any():
        out["heldout_half"] = _figures(check[split == "heldout"])
    out["n_pairs"] = sum(1 for _ in periodic_pairs(check, split, heldout_only=False))
    out["misses"] = heldout_misses(check, split, platform, MISS_LIMIT, heldout_only=False)
    return out
