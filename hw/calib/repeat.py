"""The grid measured more than once (``xstage calibrate --repeat N``, ``--refit --records A --median-with B``), and
the flag its study added to every fit (a store buffer fitted at the top of its search).

``sweeps`` measures the whole grid ``cfg.repeat`` times on one runner and returns the point-wise median of the runs
(``xstage.sim.repeat_median.median_run``, pure) with every run's points and bursts; ``median_of`` takes the same
median of runs measured apart, for a refit. ``store_buffer_at_bound`` is the warning the repeat study's failing fits
shared (docs/calibration/fresh14.md). The sweep, the fit and the files are ``calibrate``'s; docs/calibration/method.md,
"Measuring the grid more than once", says what is measured and what the figures were.
"""

import shlex
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from xstage.errors import InputError
from xstage.units import KiB


def sweeps(cfg, runner, *, progress: bool = True, keep=None):
    """The grid measured ``cfg.repeat`` times (``sweep`` each time, one after another). Returns (points, bursts,
    runs, info): with one run its frames and (None, None); with more, the point-wise median of the runs' points
    (``xstage.sim.repeat_median.median_run``), every run's bursts with a ``repeat`` column (1, 2, ...), every run's
    points with the same column, and the median's matching info. ``keep(i, points, bursts)``, where given, is called
    as soon as run i (1, 2, ...) is measured (``PartialRuns.keep``; a single run too, so that a fit that fails after
    it loses no measurement: session 26's H100 fresh4 / fresh7 runs were lost that way)."""
    from xstage.hw.calib import calibrate      # calibrate.sweep looked up at each call (tests replace it)
    if cfg.repeat == 1:
        points, bursts = calibrate.sweep(cfg, runner, progress=progress)
        if keep is not None:
            keep(1, points, bursts)
        return points, bursts, None, None
    from xstage.sim.repeat_median import median_run
    runs = []
    for i in range(cfg.repeat):
        runs.append(calibrate.sweep(cfg, runner, progress=progress, label=f" run {i + 1}/{cfg.repeat}"))
        if keep is not None:
            keep(i + 1, *runs[-1])
    points, info = median_run({f"r{i + 1}": p for i, (p, _) in enumerate(runs)}, "--repeat")
    bursts = pd.concat([b.assign(repeat=i + 1) for i, (_, b) in enumerate(runs)], ignore_index=True)
    every = pd.concat([p.assign(repeat=i + 1) for i, (p, _) in enumerate(runs)], ignore_index=True)
    return points, bursts, every, info


# --- the runs measured so far, kept while the command runs ------------------------------------------

PARTIAL = "partial"     # OUT/partial/run-<i>/: the runs of a sweep (--repeat N, or one) measured so far


class RunsKept(Exception):
    """A sweep (one run or ``--repeat N``) stopped (Ctrl-C, SIGTERM, an error of the runner or the fit:
    ``__cause__``) after at least one run was kept in OUT/partial. ``when``: ``in run 2 of 3`` (or ``after run 3 of
    3``: in the copy-engine run or the fit); ``kept``: the kept runs' folders; ``command``: the refit that fits them
    (argv). ``str()``: ``<when>: kept run(s) ... in OUT/partial; to fit what was kept: <command>``, for one stderr
    line."""

    def __init__(self, when: str, kept, folder: Path, command: list):
        self.when, self.kept, self.command = when, list(kept), list(command)
        runs = "run 1" if len(self.kept) == 1 else f"runs 1-{len(self.kept)}"
        self.tail = f"kept {runs} in {folder}; to fit what was kept: {shlex.join(self.command)}"
        super().__init__(f"{when}: {self.tail}")


class PartialRuns:
    """OUT/partial/run-<i>/ (points.parquet with the run's split, bursts.parquet): each run of a sweep (``--repeat``,
    or the one run of a plain sweep), written as soon as it is measured, so that a stop in a later run, or in the
    fit, loses only what was not yet measured. Each run is a calibration folder of one run (the records' meta is the
    sweep's with ``config.repeat`` 1, plus ``repeat_run`` = {run, of}), written into a temporary folder beside and
    renamed: a run folder is whole or absent. ``stopped`` names what was kept and the refit of it (``--refit
    --records run-1 --median-with run-2 ...``: the point-wise median of the kept runs, the split and model the
    sweep's, into OUT); ``remove`` drops the folder once the final records are written. ``meta_now()``: the records'
    meta as of now; ``split_args``: the sweep's (fraction, seed, rule)."""

    def __init__(self, out: Path, of: int, meta_now, split_args, *, overwrite: bool = False):
        self.out, self.folder = Path(out), Path(out) / PARTIAL
        self.of, self.meta_now, self.split_args, self.overwrite = of, meta_now, split_args, overwrite
        self.kept = []

    def keep(self, run: int, points: pd.DataFrame, bursts: pd.DataFrame) -> Path:
        from xstage.hw.calib.calibrate import _split
        from xstage.records import save_records
        if not self.kept and self.folder.exists():   # an earlier sweep's, let through by --overwrite only
            check_partial(self.out, self.overwrite)
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        meta = self.meta_now()          # one run: its config says so; repeat_run names the sweep it came from
        meta = {**meta, "config": {**(meta.get("config") or {}), "repeat": 1}, "repeat_run": {"run": run, "of": self.of}}
        points, _, meta = _split(points, meta, self.split_args)
        tmp = Path(tempfile.mkdtemp(prefix=f".run-{run}-", suffix=".tmp", dir=self.folder))
        try:
            save_records(tmp / "bursts.parquet", "burst", bursts.assign(repeat=run), meta)
            save_records(tmp / "points.parquet", "point", points, meta)
            tmp.chmod(0o755)                         # mkdtemp makes 0700; records are meant to be shared
            tmp.rename(self.folder / f"run-{run}")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self.kept.append(self.folder / f"run-{run}")
        return self.kept[-1]

    def stopped(self, name: str, pool=(), extra=()) -> RunsKept:
        """What was kept and the command that fits it, once the sweep stopped (at least one run kept)."""
        from xstage.hw.calib.calibrate import FILES
        n = len(self.kept)
        argv = ["xstage", "calibrate", "--refit", "--records", str(self.kept[0])]
        for run in self.kept[1:]:
            argv += ["--median-with", str(run)]
        argv += ["--name", name]
        for folder in pool or ():
            argv += ["--pool", str(folder)]
        argv += [*extra, "--out", str(self.out)]
        if any((self.out / f).exists() for f in FILES):   # an --overwrite sweep's older files, or the fit's own
            argv.append("--overwrite")
        when = f"in run {n + 1} of {self.of}" if n < self.of else f"after run {n} of {self.of}"
        return RunsKept(when, self.kept, self.folder, argv)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def check_partial(out: Path, overwrite: bool = False) -> None:
    """A sweep into ``out`` refuses a partial/ folder there (runs an interrupted ``--repeat`` kept) unless
    ``overwrite``: measured runs are not replaced silently."""
    if (Path(out) / PARTIAL).exists() and not overwrite:
        raise InputError("--out", str(out), f"holds {PARTIAL}/, the runs an interrupted --repeat kept: fit them with "
                         "the --refit command it printed, or pass --overwrite to replace them")


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
