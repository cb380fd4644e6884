"""The grid measured more than once (``xstage calibrate --repeat N``, ``--refit --records A --median-with B``), and
the flag its study added to every fit (a store buffer fitted at the top of its search).

``sweeps`` measures the whole grid ``cfg.repeat`` times on one runner and returns the point-wise median of the runs
(``xstage.sim.repeat_median.median_run``, pure) with every run's points and bursts; ``median_of`` takes the same
median of runs measured apart, for a refit. ``store_buffer_at_bound`` is the warning the repeat study's failing fits
shared (docs/calibration/fresh14.md). The sweep, the fit and the files are ``calibrate``'s; docs/calibration/method.md,
"Measuring the grid more than once", says what is measured and what the figures were.
"""

from pathlib import Path

import pandas as pd

from xstage.errors import InputError
from xstage.units import KiB


def sweeps(cfg, runner, *, progress: bool = True):
    """The grid measured ``cfg.repeat`` times (``sweep`` each time, one after another). Returns (points, bursts,
    runs, info): with one run its frames and (None, None); with more, the point-wise median of the runs' points
    (``xstage.sim.repeat_median.median_run``), every run's bursts with a ``repeat`` column (1, 2, ...), every run's
    points with the same column, and the median's matching info."""
    from xstage.hw.calib import calibrate      # calibrate.sweep looked up at each call (tests replace it)
    if cfg.repeat == 1:
        return (*calibrate.sweep(cfg, runner, progress=progress), None, None)
    from xstage.sim.repeat_median import median_run
    runs = [calibrate.sweep(cfg, runner, progress=progress, label=f" run {i + 1}/{cfg.repeat}")
            for i in range(cfg.repeat)]
    points, info = median_run({f"r{i + 1}": p for i, (p, _) in enumerate(runs)}, "--repeat")
    bursts = pd.concat([b.assign(repeat=i + 1) for i, (_, b) in enumerate(runs)], ignore_index=True)
    every = pd.concat([p.assign(repeat=i + 1) for i, (p, _) in enumerate(runs)], ignore_index=True)
    return points, bursts, every, info


def median_of(src: Path, points: pd.DataFrame, meta: dict, others, split_args):
    """``--median-with``: the point-wise median of ``src``'s points and each folder of ``others`` (calibration
    folders of one grid, target and GPU, each a single run), for a refit. Returns (points, meta, runs, info,
    split_args): the split is ``split_args`` if given, else the one ``src`` recorded (it depends on the grid's
    design only), made anew on the median."""
    from xstage.hw.calib.calibrate import check_pool
    from xstage.sim.repeat_median import median_run
    config = meta.get("config") or {}
    named = {str(src): points}
    for other, pts, m in check_pool(others, config.get("target"), (meta.get("runner") or {}).get("gpu_name"), src,
                                    field="--median-with", self_note=""):
        if (m.get("config") or {}).get("grid") != config.get("grid"):
            raise InputError("--median-with", str(other), f"has grid {(m.get('config') or {}).get('grid')!r} "
                             f"(--records has {config.get('grid')!r})")
        named[str(other)] = pts
    for where, pts in named.items():
        if "n_runs" in pts:
            raise InputError("--median-with" if where != str(src) else "--records", where,
                             "is already the median of several runs (xstage calibrate --repeat): name single runs")
    if split_args is None and "split" in points:
        split_args = (config.get("heldout_fraction"), config.get("split_seed"), config.get("split_rule") or "pairs")
    named = {k: v.drop(columns=["split"], errors="ignore") for k, v in named.items()}
    med, info = median_run(named, "--median-with")
    runs = pd.concat([p.assign(repeat=i + 1) for i, p in enumerate(named.values())], ignore_index=True)
    return med, {**meta, "median_of": list(named)}, runs, info, split_args


def store_buffer_at_bound(platform) -> str | None:
    """A warning where the issue law's store buffer b0 was fitted at the top of its search (``platform_fit.BUFFERS``):
    the fit half did not identify the issue law, and a small-K burst with B above b0 is then predicted too slow
    (fresh14, and every other fit of the knee grids that failed its held-out p90: docs/calibration/fresh14.md).
    None otherwise (and for laws without b0)."""
    from xstage.sim.platform_fit import BUFFERS
    b0 = getattr(platform, "store_buffer_bytes", None)
    if not b0 or b0 < max(BUFFERS):
        return None
    return (f"the issue law's store buffer b0 was fitted at the top of its search ({b0 / KiB:g} KiB): the fit half does "
            "not identify the issue law, and small-K bursts above b0 are likely predicted too slow; measure more (K, B) "
            "pairs with B above b0 at small K, or read the held-out figures with care (docs/calibration/fresh14.md)")
