"""Platform calibration (the paper's Sec. 3.3-3.5): sweeps, fit, model check, platform file.

    xstage calibrate --target host --out data/calibration/h200-pcie-host
    torchrun --standalone --nproc-per-node=8 -m xstage.cli calibrate --target peer --peer-pattern all --out DIR

Phases, each a list of microbenchmark configurations (medians of trials; see ``microbench.py``):
    rate       zero-gap periodic bursts over K x B          -> R (drain-dominated points)
    plateau    periodic bursts with G = 2 T_period(0) + 2 us -> T_iss0(K, B)
    gap        periodic bursts, G swept over fractions of T_period(0), for a few (K, B)
    fma        the gap as a loop of FMAs (useful work) instead of a spin, one (K, B)
    isolated   one burst at a time from a drained path, volume growing, for several K -> Q(K)
plus a copy-engine transfer of the same bytes (torch copy device -> pinned host) and the PCIe
link's nominal limit, side by side. The sweep runs on any *runner* with ``run(spec) -> (frame,
info)`` and ``sm_count``: `GpuRunner` (the CUDA kernel) or `xstage.sim.calib_runner.SimRunner` (the
simulator; dry runs and tests).
The fit itself is pure (``xstage.sim.platform_fit``); summaries of committed records are
``xstage.compare.calibration_records``. Output folder: platform.json, bursts.parquet (burst records, a subset of producers), points.parquet
(one row per configuration), check.parquet (model vs measurement), copy.parquet, summary.json.
Peer records carry the pattern (``next`` or ``all``) in a ``peer_pattern`` column, in the meta's
config and target info, in the platform's notes and in the summary; records without the column ran
``next``.
"""

import dataclasses
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.errors import InputError, require_int, require_positive
from xstage.provenance import gpu_slug, platform_name as default_name  # noqa: F401 - gpu_slug: old name here
from xstage.hw.calib.staged import staged_files
from xstage.hw.calib.repeat import (PartialRuns, RunsKept, check_partial, median_of,  # noqa: F401 - old names
                                    store_buffer_at_bound, sweeps)
from xstage.hw.microbench.spec import BurstSpec
from xstage.sim.burst_summary import summarize_run
from xstage.sim.platform_fit import (DEFAULT_MODEL, LAW_KEYS, capacity_law_of, check_and_summarize,
                                     check_model, check_split_args, fit_platform, issue_law_of, split_pairs)
from xstage.units import KiB, MiB

PHASES = ("rate", "plateau", "gap", "fma", "isolated", "free-rate", "free-gap", "aligned-rate", "aligned-gap")
_PCIE_GTPS = {1: (2.5, 0.8), 2: (5.0, 0.8), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130), 5: (32.0, 128 / 130),
              6: (64.0, 242 / 256)}
H200_TENSOR_TFLOPS = {"bf16": 989.4, "fp8": 1978.9}  # dense, vendor datasheet (H100/H200 SXM)


@dataclass(frozen=True)
class CalibConfig:
    target: str
    name: str = ""
    producers: tuple = (16, 33, 66, 132)
    sizes: tuple = (8 * KiB, 16 * KiB, 32 * KiB, 64 * KiB)
    gap_configs: tuple = ((132, 32 * KiB), (66, 64 * KiB), (33, 16 * KiB), (132, 8 * KiB), (16, 64 * KiB))
    gap_fractions: tuple = (0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.75, 0.9, 1.0, 1.1, 1.3, 1.6)
    plateau_factor: float = 2.0
    iso_producers: tuple = (16, 33, 66, 132)
    iso_sizes: tuple = tuple(k * KiB for k in (2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 64, 96, 128, 192, 256))
    fma_iters: tuple = (16, 64, 256, 1024, 4096)
    bursts: int = 32               # periodic runs: at least this many bursts ...
    steady_bytes: int = 128 * MiB  # ... and enough to inject this volume (fills Q: steady state) ...
    max_bursts: int = 2048         # ... but at most this many
    iso_bursts: int = 6
    trials: int = 5
    warmup: int = 1
    settle_us: float = 10.0
    keep_producers: int = 4        # bursts.parquet keeps these producers, trial 0, <= 96 bursts per run
    copy_engine: bool = True
    free_running: bool = True      # also run the rate grid and one gap sweep free-running (no lockstep)
    aligned: bool = False          # also run the rate grid and every gap sweep with a fence-free barrier
    peer_pattern: str = "next"     # peer target: next (one sender -> the next rank) or all (all-to-all)
    free_gaps: int = 1             # this many gap sweeps (the first of the sorted gap_configs) also free-running
    grid: str = "default"          # the grid's name (``grids.GRIDS``), recorded with the run
    heldout_fraction: float = 0.3  # share of (K, B) pairs held out of the fit (0: fit on every point)
    split_seed: int = 0            # seed of the held-out split (``xstage.sim.platform_fit.split_pairs``)
    split_rule: str = "pairs"      # the split's rule (``xstage.sim.split_sweeps.SPLIT_RULES``; bracket: knee14)
    model: str = DEFAULT_MODEL     # the platform model fitted (``xstage.sim.platform_fit.MODELS``)
    repeat: int = 1                # the whole grid measured this many times, fitted on the point-wise median

    def __post_init__(self):
        from xstage.hw.common.targets import check_peer_pattern
        check_peer_pattern(self.peer_pattern, self.target)
        for fld in ("producers", "iso_producers"):
            vals = tuple(require_int(fld, k) for k in getattr(self, fld))
            if not vals:
                raise InputError(fld, getattr(self, fld), "must hold at least one producer count")
            object.__setattr__(self, fld, vals)
        for fld in ("sizes", "iso_sizes"):
            vals = tuple(require_int(fld, b, minimum=16) for b in getattr(self, fld))
            if not vals or any(b % 16 for b in vals):
                raise InputError(fld, getattr(self, fld), "must be non-empty multiples of 16 bytes")
            object.__setattr__(self, fld, vals)
        if len(self.producers) * len(self.sizes) < 3:
            raise InputError("producers x sizes", (self.producers, self.sizes), "must give >= 3 points")
        object.__setattr__(self, "gap_configs", tuple((int(k), int(b)) for k, b in self.gap_configs))
        object.__setattr__(self, "gap_fractions", tuple(float(f) for f in self.gap_fractions))
        for f in self.gap_fractions:
            require_positive("gap_fractions", f)
        require_positive("plateau_factor", self.plateau_factor)
        for fld in ("bursts", "iso_bursts", "trials", "max_bursts"):
            require_int(fld, getattr(self, fld), minimum=2 if fld != "trials" else 1)
        require_int("steady_bytes", self.steady_bytes, minimum=0)
        if self.max_bursts < self.bursts:
            raise InputError("max_bursts", self.max_bursts, f"must be >= bursts ({self.bursts})")
        require_int("warmup", self.warmup, minimum=0)
        require_int("keep_producers", self.keep_producers, minimum=0)
        require_int("free_gaps", self.free_gaps, minimum=0)
        require_int("repeat", self.repeat, minimum=1)
        check_model(self.model)
        fraction, seed = check_split_args(self.heldout_fraction, self.split_seed)
        object.__setattr__(self, "heldout_fraction", fraction)
        object.__setattr__(self, "split_seed", seed)
        from xstage.sim.split_sweeps import check_split_rule
        check_split_rule(self.split_rule)

    def periodic_bursts(self, volume_bytes: int) -> int:
        """Bursts of a periodic run: >= bursts, injecting >= steady_bytes, <= max_bursts; even."""
        n = max(self.bursts, -(-self.steady_bytes // volume_bytes))
        return int(min(self.max_bursts, n + n % 2))

    def clipped(self, sm_count: int) -> "CalibConfig":
        """Producer counts above the GPU's SM count become the SM count."""
        clip = lambda ks: tuple(sorted({min(int(k), sm_count) for k in ks}))  # noqa: E731
        return CalibConfig(**{**asdict(self), "producers": clip(self.producers),
                              "iso_producers": clip(self.iso_producers),
                              "gap_configs": tuple(sorted({(min(k, sm_count), b) for k, b in self.gap_configs}))})


def peer_pattern_note(pattern: str, world_size=None) -> str:
    """What a peer pattern measured (goes into the platform's notes)."""
    w = f"W = {world_size}" if world_size else "W ranks"
    if pattern == "all":
        return (f"all: all-to-all over {w}, every rank sending at once; producer p of rank r stores into rank "
                "(r + 1 + p mod (W-1)) mod W (each of the W-1 peers gets floor(K/(W-1)) or one more producer, "
                "every rank receives K producers' stores), each sender into its own region of every peer's "
                "buffer; the ranks meet at a barrier before every trial. V = K*B is one sender's aggregate burst "
                "and R its drain rate with every GPU's links loaded in both directions; the recording rank is 0.")
    return (f"next: every producer of a rank stores into the next rank's buffer (r -> r+1 mod W, {w}), all ranks "
            "sending at once without a cross-rank barrier; the recording rank is 0.")


def pcie_limit_GBps(gen, width) -> float | None:
    """Nominal per-direction PCIe bandwidth: GT/s x lanes x encoding / 8 (Gen5 x16 = 63.0 GB/s)."""
    try:
        rate, enc = _PCIE_GTPS[int(gen)]
        return rate * int(width) * enc / 8.0
    except (KeyError, TypeError, ValueError):
        return None


# --- the sweep -------------------------------------------------------------------------------------

def _keep(frame: pd.DataFrame, producers: int, keep: int, *, head: int = 32, tail: int = 64) -> pd.DataFrame:
    """The sample of raw records stored: ``keep`` evenly spaced producers (0 = all), the first trial,
    and of a long run its first ``head`` and last ``tail`` bursts (the transient and the steady end)."""
    frame = frame[frame["trial"] == frame["trial"].min()]
    if 0 < keep < producers:
        chosen = np.unique(np.linspace(0, producers - 1, keep).round().astype(int))
        frame = frame[frame["producer"].isin(chosen)]
    n = int(frame["burst"].max()) + 1
    if n > head + tail:
        frame = frame[(frame["burst"] < head) | (frame["burst"] >= n - tail)]
    return frame


def plan_size(cfg: CalibConfig, fma: bool = True) -> int:
    grid = len({(k, b) for k in cfg.producers for b in cfg.sizes} | set(cfg.gap_configs))
    n = 2 * grid + len(cfg.gap_configs) * len(cfg.gap_fractions)
    n += len(cfg.iso_producers) * len(cfg.iso_sizes) + (len(cfg.fma_iters) if fma else 0)
    if cfg.free_running:
        n += grid + min(cfg.free_gaps, len(cfg.gap_configs)) * len(cfg.gap_fractions)
    if cfg.aligned:
        n += grid + len(cfg.gap_configs) * len(cfg.gap_fractions)
    return n


def sweep(cfg: CalibConfig, runner, *, progress: bool = True, label: str = ""):
    """Run every phase on ``runner`` once (``cfg.repeat`` is ``sweeps``'s). Returns (points, bursts) frames."""
    from tqdm import tqdm

    cfg = cfg.clipped(runner.sm_count)
    fma = getattr(runner, "supports_fma", True)
    bar = tqdm(total=plan_size(cfg, fma), desc=f"calibrate {cfg.target}{label}", unit="cfg", file=sys.stderr,
               disable=not progress, dynamic_ncols=True)
    points, bursts = [], []

    pattern = {"peer_pattern": cfg.peer_pattern} if cfg.target == "peer" else {}   # a column on peer records

    def measure(phase, spec):
        frame, _info = runner.run(spec)
        row = {"phase": phase, "target": cfg.target, "mode": spec.mode, "gap_kind": spec.gap_kind,
               "producers": spec.producers, "bytes_per_producer": spec.bytes_per_producer,
               "volume(bytes)": spec.volume_bytes, "gap(us)": spec.gap_us, "fma_iters": spec.fma_iters,
               **pattern, **{k: v for k, v in summarize_run(frame).items()}}
        points.append(row)
        kept = _keep(frame, spec.producers, cfg.keep_producers).assign(phase=phase, **pattern)
        bursts.append(kept)
        bar.set_postfix_str(f"{phase} K={spec.producers} B={spec.bytes_per_producer // KiB}KiB "
                            f"T_iss={row['T_iss(us)']:.2f}us")
        bar.update()
        return row

    def periodic(k, b, gap=0.0, **kw):
        return BurstSpec(k, b, gap, bursts=cfg.periodic_bursts(k * b), trials=cfg.trials, warmup=cfg.warmup, **kw)

    try:                   # the bar ends its line even when a run raises (Ctrl-C): the error line is its own
        period0 = {}
        grid = sorted({(k, b) for k in cfg.producers for b in cfg.sizes} | set(cfg.gap_configs))
        for k, b in grid:
            period0[(k, b)] = measure("rate", periodic(k, b))["period(us)"]
        for k, b in grid:
            measure("plateau", BurstSpec(k, b, cfg.plateau_factor * period0[(k, b)] + 2.0, bursts=cfg.bursts,
                                         trials=cfg.trials, warmup=cfg.warmup))
        for k, b in cfg.gap_configs:
            for f in cfg.gap_fractions:
                measure("gap", periodic(k, b, f * period0[(k, b)]))
        if fma:
            k, b = max(cfg.gap_configs)
            for iters in cfg.fma_iters:
                measure("fma", periodic(k, b, gap_kind="fma", fma_iters=iters))
        if cfg.aligned:        # per-burst barrier without fences: aligned bursts with carry-over
            for k, b in grid:
                measure("aligned-rate", periodic(k, b, mode="aligned"))
            for k, b in cfg.gap_configs:
                for f in cfg.gap_fractions:
                    measure("aligned-gap", periodic(k, b, f * period0[(k, b)], mode="aligned"))
        if cfg.free_running:   # the same bursts without the per-burst barrier: producers may drift apart
            for k, b in grid:
                measure("free-rate", periodic(k, b, mode="free"))
            for k, b in cfg.gap_configs[:cfg.free_gaps]:
                for f in cfg.gap_fractions:
                    measure("free-gap", periodic(k, b, f * period0[(k, b)], mode="free"))
        for k in cfg.iso_producers:
            for b in cfg.iso_sizes:
                measure("isolated", BurstSpec(k, b, 0.0, mode="isolated", bursts=cfg.iso_bursts, trials=cfg.trials,
                                              warmup=cfg.warmup, settle_us=cfg.settle_us))
    finally:
        bar.close()
    return pd.DataFrame(points), pd.concat(bursts, ignore_index=True)


# --- the whole run and its files -------------------------------------------------------------------

FILES = ("platform.json", "bursts.parquet", "points.parquet", "points-runs.parquet", "check.parquet", "copy.parquet",
         "summary.json")


def check_out_dir(out_dir, *, overwrite: bool = False, partial: bool = True) -> Path:
    """The output folder, checked before the sweep starts and without creating anything
    (``xstage.paths.output_folder``): no calibration files in it unless ``overwrite``, nor (``partial``: a sweep's
    check, not a refit's) the runs an interrupted ``--repeat`` kept (``repeat.check_partial``)."""
    from xstage.paths import output_folder

    out = output_folder(out_dir, overwrite=overwrite, holds=FILES)
    if partial:
        check_partial(out, overwrite)
    return out


def _link_info(gpu: dict) -> dict:
    """The PCIe link: nvidia-smi's max generation/width (an idle link may show Gen1 as 'current')."""
    import subprocess
    out = {"pcie_gen": gpu.get("pcie_gen"), "pcie_width": gpu.get("pcie_width")}
    try:
        line = subprocess.run(["nvidia-smi", "--query-gpu=pcie.link.gen.max,pcie.link.width.max",
                               "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout
        gen, width = (x.strip() for x in line.splitlines()[0].split(","))
        out.update(pcie_gen_max=gen, pcie_width_max=width)
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        pass
    out["pcie_limit_GBps"] = (pcie_limit_GBps(out.get("pcie_gen_max"), out.get("pcie_width_max"))
                              or pcie_limit_GBps(out["pcie_gen"], out["pcie_width"]))
    out["pcie_gen5_x16_GBps"] = pcie_limit_GBps(5, 16)
    return out


def run_calibration(cfg: CalibConfig, runner, out_dir, *, overwrite: bool = False, progress: bool = True,
                    provenance_block: dict | None = None, pool=(), issue_law=(), per_k_capacity: bool = False) -> dict:
    """Sweep on ``runner``, fit, check, write the output folder. Returns the summary dict. Each run (one, or
    ``cfg.repeat``) is kept in OUT/partial as soon as it is measured (``repeat.PartialRuns``), and the folder removed
    once the final records are written; a stop after a run was kept (Ctrl-C, SIGTERM, an error of a later run or of
    the fit) raises ``repeat.RunsKept`` from it, naming the kept runs and the refit that fits them."""
    out = check_out_dir(out_dir, overwrite=overwrite)
    if pool:   # the pool's target and GPU before any measurement: a bad --pool must not cost the sweep
        check_pool(pool, cfg.target, runner.describe().get("gpu_name"))
    check_combo(cfg.model, issue_law, per_k_capacity)
    if issue_law:
        check_pool(issue_law, cfg.target, runner.describe().get("gpu_name"), field="--issue-law")
    t = time.perf_counter()
    described = runner.describe()
    if provenance_block is None:
        from xstage.provenance import provenance
        provenance_block = provenance(with_gpu=described.get("runner") == "gpu")
    link = _link_info(provenance_block.get("gpu", {}) or {})

    def meta_now():
        return {"config": asdict(cfg), "provenance": provenance_block, "runner": runner.describe(), "link": link,
                "wall_s": time.perf_counter() - t}

    name = cfg.name or default_name(cfg.target, described.get("gpu_name", ""), cfg.peer_pattern)
    if not cfg.name and described.get("issue", "store") != "store":   # NVSHMEM device puts (hw/microbench/puts.py)
        name += f"-{described['issue']}"
    split_args = (cfg.heldout_fraction, cfg.split_seed, cfg.split_rule)
    kept = PartialRuns(out, cfg.repeat, meta_now, split_args, overwrite=overwrite)
    try:
        points, bursts, runs, repeat_info = sweeps(cfg, runner, progress=progress,
                                                   keep=kept.keep)
        volumes = sorted(set(points.loc[points["phase"] == "rate", "volume(bytes)"]))
        copy = runner.copy_engine(volumes) if cfg.copy_engine else pd.DataFrame()
        summary = finish(points, bursts, copy, meta_now(), out, name=name, overwrite=overwrite, split_args=split_args,
                         model=cfg.model, pool=pool, runs=runs, repeat_info=repeat_info, issue_law=issue_law,
                         per_k_capacity=per_k_capacity)
    except (KeyboardInterrupt, Exception) as err:
        if not kept.kept:
            raise
        raise kept.stopped(name, pool, combo_argv(issue_law, per_k_capacity)) from err
    kept.remove()                                   # the final records hold every run now
    return summary


_RECORD_KEYS = ("kind", "schema_version", "table")   # written by save_records itself, never taken from a loaded meta


def _split(points: pd.DataFrame, meta: dict, split_args) -> tuple[pd.DataFrame, pd.Series | None, dict]:
    """The held-out split of a run: a new one from ``split_args`` = (fraction, seed[, rule]) (rule: ``pairs``
    unless given; ``xstage.sim.split_sweeps.SPLIT_RULES``), else the one recorded in the points' ``split`` column
    (fraction, seed and rule from the recorded config), else none (fit on all)."""
    from xstage.sim.split_sweeps import check_split_rule, split_by_rule
    config = dict(meta["config"])
    if split_args is not None:
        fraction, seed = check_split_args(*split_args[:2])
        rule = check_split_rule(split_args[2] if len(split_args) > 2 else "pairs", "--split-rule")
        split = split_pairs(points, fraction, seed) if rule == "pairs" else split_by_rule(points, rule, fraction, seed)
        config.update(heldout_fraction=fraction, split_seed=seed)
        if rule != "pairs" or "split_rule" in config:
            config.update(split_rule=rule)
        points = points.assign(split=split)
    elif "split" in points:
        split = points["split"].astype(str)
        if not split.isin(("fit", "heldout")).all():
            raise InputError("points.split", sorted(set(split) - {"fit", "heldout"}), "must be fit or heldout")
    else:
        return points, None, meta
    return points, split, {**meta, "config": config}


def _rule_text(config: dict) -> str:
    """The recorded split rule's one-line description (``pairs`` where the config names none)."""
    from xstage.sim.split_sweeps import rule_text
    return rule_text(config.get("split_rule") or "pairs")


def check_pool(pool, target: str | None = None, gpu_name: str | None = None, records=None,
               field: str = "--pool", self_note: str = " (its fit half is fitted anyway)") -> list:
    """The ``--pool`` folders (or ``field``'s: ``--median-with``), checked before anything is measured or fitted:
    each a calibration folder (a points.parquet) named once, not ``records`` itself, and -- where ``target`` /
    ``gpu_name`` are given -- of that target and GPU. Returns [(path, points, meta)]."""
    from xstage.records import load_records
    seen, out = set(), []
    for folder in pool or ():
        src = Path(folder)
        if not str(folder).strip() or not (src / "points.parquet").is_file():
            raise InputError(field, str(folder), "holds no points.parquet (a calibration folder)")
        if src.resolve() in seen:
            raise InputError(field, str(folder), "is named twice")
        if records is not None and src.resolve() == Path(records).resolve():
            raise InputError(field, str(folder), f"is --records itself{self_note}")
        seen.add(src.resolve())
        points, meta = load_records(src / "points.parquet", "point")
        got = (meta.get("config") or {}).get("target")
        if target is not None and got != target:
            raise InputError(field, str(folder), f"is a {got} calibration (the fitted records are {target})")
        gpu = (meta.get("runner") or {}).get("gpu_name")
        if gpu_name and gpu and gpu != gpu_name:
            raise InputError(field, str(folder), f"was measured on {gpu} (the fitted records on {gpu_name})")
        out.append((src, points, meta))
    return out


def pooled_rows(pool: list, heldout_pairs: set) -> tuple[pd.DataFrame, list]:
    """The rows the ``--pool`` folders add to the fit: each folder's own fit half (its recorded split's ``fit``
    rows; every row where it recorded no split), less the rows of any (K, B) pair held out of the fitted records,
    so that their held-out check stays held out. Returns (rows, one description per folder)."""
    frames, info = [], []
    for src, points, meta in pool:
        rows = points[points["split"].astype(str) == "fit"] if "split" in points else points
        pair = list(zip(rows["producers"].astype(int), rows["bytes_per_producer"].astype(int)))
        clash = np.array([p in heldout_pairs for p in pair], dtype=bool)
        frames.append(rows[~clash].drop(columns=["split"], errors="ignore"))
        info.append({"records": str(src), "grid": (meta.get("config") or {}).get("grid"),
                     "git_commit": (meta.get("provenance") or {}).get("git_commit"), "n_points": int((~clash).sum()),
                     "n_left_out_heldout_pairs": len({p for p, c in zip(pair, clash) if c})})
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), info


COMBO_MODEL = "two-stage-lockq"   # --issue-law and --per-k-capacity: the law combo18 was measured with


def check_combo(model, issue_law=(), per_k_capacity: bool = False) -> None:
    """``--issue-law`` / ``--per-k-capacity`` go with ``--model two-stage-lockq`` only (combo18's law; the per-K step
    reads lockq's line and rho): one InputError naming the flag otherwise. ``model`` None: checked later, against
    the recorded model (a refit)."""
    if model is None or model == COMBO_MODEL:
        return
    why = f"goes with --model {COMBO_MODEL} only (the model fitted is {model})"
    if issue_law:
        raise InputError("--issue-law", list(issue_law), why)
    if per_k_capacity:
        raise InputError("--per-k-capacity", model, why)


def combo_argv(issue_law=(), per_k_capacity: bool = False) -> list:
    """The command-line flags that repeat ``issue_law`` / ``per_k_capacity`` (a kept run's refit command)."""
    argv = []
    for folder in issue_law or ():
        argv += ["--issue-law", str(folder)]
    return argv + (["--per-k-capacity"] if per_k_capacity else [])


def fixed_issue_law(issue_law, *, target: str, gpu_name, heldout_pairs: set, model: str, sm_count: int):
    """The issue law of ``--issue-law`` folders (``check_pool``'d): ``model`` fitted on their fit halves together
    (``pooled_rows``, less any pair held out here) and its issue law kept (``issue_law_of``), to be held fixed in
    this run's fit (combo18: knee10's five broad host grids; docs/calibration/combo18.md). Returns (law, info)."""
    rows, info = pooled_rows(check_pool(issue_law, target, gpu_name, field="--issue-law"), heldout_pairs)
    _, fit = fit_platform(rows, name="issue-law", target=target, sm_count=sm_count,
                          capacity_law=capacity_law_of(model))
    law = issue_law_of(fit)
    return law, {"records": info, **{k: law.get(k) for k in LAW_KEYS}}


def drain_not_seen(summary: dict) -> str | None:
    """A warning where no zero-gap rate point waited for the drain (``R_is_lower_bound``): R is then the fastest rate
    measured, not a drain rate. None otherwise."""
    if not summary.get("R_is_lower_bound"):
        return None
    return (f"R was not measured as a drain rate: no zero-gap rate point waited for the drain, so R is the fastest rate "
            f"measured ({summary['R_GBps']:.4g} GB/s). On local HBM this is expected (nothing backpressures); on a "
            "link, the runs may be too short to fill the X-Stage (--quick): lengthen them (--steady, --max-bursts)")


def finish(points, bursts, copy, meta, out: Path, *, name: str, overwrite: bool, split_args=None,
           model: str | None = None, pool=(), runs=None, repeat_info=None, issue_law=(),
           per_k_capacity: bool = False) -> dict:
    """Fit + check + write (shared by a fresh run and ``--refit``). Each file keeps its record kind:
    a meta block loaded from a record file loses its ``kind`` (and ``table``) first. With a split (new from
    ``split_args``, or recorded in the points), the platform is fitted on the ``fit`` points only and the
    check reports both sets. ``model``: the platform model to fit (``MODELS``; None: the one recorded in the
    meta's config, else v1), recorded in the config, the summary and the platform's notes. ``pool``: other
    calibration folders of the same target and GPU (``check_pool``) whose fit halves join the fit
    (``pooled_rows``); the check, the split and the records written stay this run's own. ``runs`` / ``repeat_info``:
    the grid was measured more than once and ``points`` is the point-wise median (``sweeps``, ``median_of``): every
    run's points go to points-runs.parquet, the matching info to the summary and the platform's notes.
    ``issue_law`` (calibration folders) / ``per_k_capacity`` (``--model two-stage-lockq`` only; combo18,
    docs/calibration/combo18.md): the issue law fitted on those folders is held fixed (``fixed_issue_law``), and
    after the fit each lockstep K of this run's fit half gets its own Q(K) (``fit_knee.search_per_k``)."""
    from xstage.records import atomic_write_text, save_records

    meta = {k: v for k, v in meta.items() if k not in _RECORD_KEYS}
    model = check_model(model if model is not None else meta["config"].get("model", DEFAULT_MODEL), "--model")
    check_combo(model, issue_law, per_k_capacity)
    meta = {**meta, "config": {**meta["config"], "model": model}}
    points, split, meta = _split(points, meta, split_args)
    target = meta["config"]["target"]
    tensor = H200_TENSOR_TFLOPS if "H200" in str(meta["runner"].get("gpu_name", "")) else {}
    notes = {"provenance": meta["provenance"], "timer": meta["runner"].get("timer"), "link": meta["link"],
             "method": "xstage calibrate: see docs/calibration.md; raw records beside this file."}
    if tensor:
        notes["tensor_TFLOPs"] = "Dense H200 SXM datasheet rates (bf16 989.4, fp8 1978.9 TFLOP/s): leads, not measured."
    pattern = meta["config"].get("peer_pattern", "next") if target == "peer" else None
    if pattern:
        notes["peer_pattern"] = peer_pattern_note(pattern, (meta["runner"].get("target_info") or {}).get("world_size"))
    if pattern and meta["runner"].get("runner") == "gpu":   # which issue path (issue 18); older records: stores
        info = meta["runner"].get("target_info") or {}
        notes["issue_path"] = (f"{meta['runner'].get('issue', 'store')}: "
                               f"{info.get('issue', 'st.global.v4 (16-byte stores) through the peer pointer')}; "
                               f"symmetric memory from {info.get('backend', 'torch-symm-mem')}")
    held_pairs = set() if split is None else {(int(k), int(b)) for k, b in zip(
        points["producers"][split == "heldout"], points["bytes_per_producer"][split == "heldout"])}
    if split is not None:
        held = sorted({(k, b // KiB) for k, b in held_pairs})
        notes["heldout_split"] = (f"Fitted on the 'fit' points only ({int((split == 'fit').sum())} of {len(points)}); "
                                  f"held out (K, B KiB): {held or 'none'}; heldout_fraction "
                                  f"{meta['config'].get('heldout_fraction')}, split_seed "
                                  f"{meta['config'].get('split_seed')}. Rule: {_rule_text(meta['config'])}.")
    fitted = points if split is None else points[split.to_numpy() == "fit"]
    pool_info = []
    if pool:
        pool = check_pool(pool, target, meta["runner"].get("gpu_name"))
        extra, pool_info = pooled_rows(pool, held_pairs)
        fitted = pd.concat([fitted.drop(columns=["split"], errors="ignore"), extra], ignore_index=True)
        meta = {**meta, "config": {**meta["config"], "pool": [p["records"] for p in pool_info]}}
        notes["pool"] = ("Fitted together with the fit halves of " + "; ".join(
            f"{p['records']} ({p['n_points']} points, grid {p['grid']}, commit {str(p['git_commit'])[:7]}"
            + (f", {p['n_left_out_heldout_pairs']} pairs held out here left out" if p["n_left_out_heldout_pairs"]
               else "") + ")" for p in pool_info) + " (xstage calibrate --pool; docs/calibration/knee10.md); "
            "the model check and the split are this run's own.")
    if repeat_info is not None:
        n = len(repeat_info["points_per_run"])
        notes["repeat"] = (f"Fitted on the point-wise median of {n} runs of the grid "
                           f"({', '.join(repeat_info['points_per_run'])}; {repeat_info['in_every_run']} of "
                           f"{repeat_info['points']} points held by every run; docs/calibration/knee21.md); the "
                           "check is on the median too.")
    notes["model"] = (f"{model}: fitted by `xstage calibrate --model {model}` (capacity law {capacity_law_of(model)!r}; "
                      "docs/calibration.md, 'Choosing the model').")
    sm_count = int(meta["runner"].get("sm_count", 132))
    law, law_info = None, None
    if issue_law:
        law, law_info = fixed_issue_law(issue_law, target=target, gpu_name=meta["runner"].get("gpu_name"),
                                        heldout_pairs=held_pairs, model=model, sm_count=sm_count)
        meta = {**meta, "config": {**meta["config"], "issue_law": [p["records"] for p in law_info["records"]]}}
        notes["issue_law"] = (
            "The issue law held fixed (xstage calibrate --issue-law; combo18, docs/calibration/combo18.md): fitted "
            f"with {model} on the fit halves of " + "; ".join(f"{p['records']} ({p['n_points']} points)"
                                                              for p in law_info["records"])
            + f": t_fixed {law['t_fixed_us']:.3f} us, P {law['producer_issue_GBps']:.1f} GB/s above b0 "
            f"{(law.get('store_buffer_bytes') or 0) / KiB:.0f} KiB, start skew {law.get('start_skew_us') or 0:.3f} us, "
            + ("no ceiling" if law.get("injection_GBps") is None else f"ceiling {law['injection_GBps']:.1f} GB/s")
            + "; everything else is this run's own fit.")
    platform, fit = fit_platform(fitted, name=name, target=target, sm_count=sm_count,
                                 tensor_TFLOPs=tensor, notes=notes, capacity_law=capacity_law_of(model),
                                 issue_law=law)
    per_k = None
    if per_k_capacity:
        from xstage.sim import fit_knee
        own = points if split is None else points[split.to_numpy() == "fit"]
        line = platform                             # lockq's: Q(K) on the line Q_shared + K q_sm
        caps = fit_knee.search_per_k(own, line)
        platform = fit_knee.per_k_platform(line, caps, points["producers"])
        per_k = {"Q_MiB": {str(k): q / MiB for k, q in sorted(caps.items())},
                 "Q_line_MiB": {str(k): line.capacity_bytes(k) / MiB for k in sorted(caps)}}
        meta = {**meta, "config": {**meta["config"], "per_k_capacity": True}}
        platform = dataclasses.replace(platform, notes={**platform.notes, "per_k_capacity": (
            "Q(K) per lockstep K of the fit half (xstage calibrate --per-k-capacity; perk18 / combo18, "
            "docs/calibration/combo18.md): lockq's loss on that K's pairs, rho and the floor Q_shared kept; "
            + ", ".join(f"K={k}: {per_k['Q_MiB'][k]:.3f} MiB (line {per_k['Q_line_MiB'][k]:.3f})"
                        for k in per_k["Q_MiB"]) + ".")})
    if pattern == "all":
        platform = dataclasses.replace(platform, description="Calibrated by `xstage calibrate --target peer "
                                       "--peer-pattern all` (all-to-all).")
    check, summary = check_and_summarize(points, platform, split, fraction=meta["config"].get("heldout_fraction"),
                                         seed=meta["config"].get("split_seed"),
                                         rule=meta["config"].get("split_rule"))
    summary["model"] = model
    at_bound = store_buffer_at_bound(platform)
    if at_bound:
        summary["store_buffer_at_bound"] = True
        summary["warning"] = at_bound
        platform = dataclasses.replace(platform, notes={**platform.notes, "warning": at_bound})
    if repeat_info is not None:
        summary["repeat"] = len(repeat_info["points_per_run"])
        summary["repeat_points"] = repeat_info
    if pool_info:
        summary["pool"] = pool_info
    if law_info is not None:
        summary["issue_law"] = law_info
    if per_k is not None:
        summary["per_k_capacity"] = per_k
    if split is not None:
        summary["grid"] = meta["config"].get("grid", "default")
    if len(copy):
        summary["copy_engine_GBps"] = float(copy["copy(GBps)"].max())
    summary["pcie_limit_GBps"] = meta["link"].get("pcie_limit_GBps") or meta["link"]["pcie_gen5_x16_GBps"]
    summary["timer_tick_ns"] = (meta["runner"].get("timer") or {}).get("tick_ns")
    summary["fit_Q"] = {str(k): {kk: vv for kk, vv in c.items() if kk != "residuals"} for k, c in fit["Q"].items()}
    summary["fence_rate_GBps"] = {str(k): v for k, v in fit["fence_rate_GBps"].items()}
    rate_pts = points[points["phase"] == "rate"]
    if "kernel(GBps)" in rate_pts and rate_pts["kernel(GBps)"].notna().any():   # bytes / CUDA-event kernel time
        summary["kernel_GBps_rate_max"] = float(rate_pts["kernel(GBps)"].max())
        summary["kernel_GBps_rate_median"] = float(rate_pts["kernel(GBps)"].median())
    free_pts = points[points["phase"] == "free-rate"]
    if len(free_pts):
        summary["free_rate_GBps_max"] = float((free_pts["volume(bytes)"] / free_pts["period(us)"]).max() / 1e3)
    summary["R_drain_dominated_points"] = int(fit["R"]["n_used"])
    summary["R_is_lower_bound"] = not fit["R"]["drain_limited"]
    warnings = [w for w in (at_bound, drain_not_seen(summary)) if w]
    if warnings:
        summary["warnings"] = warnings
    model_errors = {k: summary[k] for k in summary if "rel_err" in k or k.startswith("n_") or k.endswith("n_points")
                    or k.endswith("n_pairs")}
    platform = dataclasses.replace(platform, notes={**platform.notes, "model_check": model_errors})
    meta = {**meta, "platform": platform.name, "platform_hash": platform.content_hash}
    out.mkdir(parents=True, exist_ok=True)
    with staged_files(out, overwrite) as stage:   # every file written first, then moved in together
        if bursts is not None:                  # a refit from --records leaves the burst sample in its source
            save_records(stage / "bursts.parquet", "burst", bursts.assign(platform=platform.name), meta)
        save_records(stage / "points.parquet", "point", points, meta)
        if runs is not None:
            save_records(stage / "points-runs.parquet", "point", runs, meta)
        save_records(stage / "check.parquet", "summary", check, meta, table="calibration_check")
        if len(copy):
            save_records(stage / "copy.parquet", "kernel", copy, meta)
        from xstage.records.platform import save_platform
        save_platform(platform, stage / "platform.json")
        from xstage.records import json_safe as _clean
        atomic_write_text(stage / "summary.json", json.dumps(_clean(summary), indent=2) + "\n")
    return summary


def refit(out_dir, *, name: str | None = None, overwrite: bool = False, split_args=None, model: str | None = None,
          records=None, pool=(), median_with=(), issue_law=(), per_k_capacity: bool = False) -> dict:
    """Re-fit a calibration folder from its points.parquet (no GPU needed). ``records``: the folder to read
    (e.g. committed measured records); its files are only read and everything goes to ``out_dir``, a folder
    free of calibration files (or ``overwrite``). Without ``records``, ``out_dir`` itself is refitted and every
    file of it rewritten (the fit files, and the records' metadata and platform name), so only with
    ``overwrite``. Each record file keeps its kind; a refit into a new folder copies no bursts.parquet (the
    burst sample stays in ``records``; ``refit_of`` in the metadata names it). The split: a new one from ``split_args`` = (fraction,
    seed), else the recorded one, else none (records from before the split are fitted on every point, as they
    were). ``model``: the platform model (``MODELS``); None keeps the recorded one (v1 for older records).
    ``pool``: other calibration folders whose fit halves join the fit (``finish``). ``median_with``: other runs of
    the same grid (``median_of``; needs ``records``): the fit is on the point-wise median of ``records`` and them.
    ``issue_law`` / ``per_k_capacity``: as ``finish`` (not kept from the records: a refit fits them only when
    given)."""
    from xstage.records import load_records

    if model is not None:
        check_model(model, "--model")
    out = Path(out_dir)
    if median_with and records is None:
        raise InputError("--median-with", list(median_with), "needs --records (the median is written to a new "
                         "folder; the measured points are never replaced)")
    if records is None:
        src = out
        if not overwrite:
            held = [f for f in FILES if (out / f).exists()]
            raise InputError("--out", str(out), f"holds {', '.join(held) or 'no calibration records'}: --refit "
                             "rewrites them (pass --overwrite, or --records SRC to write a new folder)")
    else:
        src = Path(records)
        if not (src / "points.parquet").is_file():
            raise InputError("--records", str(src), "holds no points.parquet (a calibration folder)")
        if src.resolve() == out.resolve():
            raise InputError("--records", str(src), "is --out itself: leave out --records to refit in place")
        out = check_out_dir(out, overwrite=overwrite, partial=False)   # a refit writes no partial/
    points, meta = load_records(src / "points.parquet", "point")
    check_pool(pool, (meta.get("config") or {}).get("target"), (meta.get("runner") or {}).get("gpu_name"), src)
    check_combo(model, issue_law, per_k_capacity)
    check_pool(issue_law, (meta.get("config") or {}).get("target"), (meta.get("runner") or {}).get("gpu_name"),
               field="--issue-law")
    bursts = None                           # --records: the burst sample stays in SRC (not copied)
    if records is None and (src / "bursts.parquet").exists():
        bursts, _ = load_records(src / "bursts.parquet", "burst")
    copy = load_records(src / "copy.parquet", "kernel")[0] if (src / "copy.parquet").exists() else pd.DataFrame()
    runs = repeat_info = None
    if median_with:
        points, meta, runs, repeat_info, split_args = median_of(src, points, meta, median_with, split_args)
    if records is not None:
        meta = {**meta, "refit_of": str(src)}
    return finish(points, bursts, copy, meta, out, name=name or meta.get("platform") or "refit",
                  overwrite=True if records is None else overwrite, split_args=split_args, model=model, pool=pool,
                  runs=runs, repeat_info=repeat_info, issue_law=issue_law, per_k_capacity=per_k_capacity)
