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
info)`` and ``sm_count``: `GpuRunner` (the CUDA kernel) or `SimRunner` (the simulator; tests).
Output folder: platform.json, bursts.parquet (burst records, a subset of producers), points.parquet
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
from xstage.sim import fit as calib_fit
from xstage.hw.microbench.runner import BurstSpec, summarize_run
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


def default_name(target: str, gpu_name: str = "", peer_pattern: str = "next") -> str:
    slug = "".join(ch for ch in gpu_name.lower().replace("nvidia", "").split(" ")[-1] if ch.isalnum() or ch == "-")
    slug = slug or "gpu"
    suffix = {"host": "pcie-host", "local": "local", "peer": "peer"}[target]
    if target == "peer" and peer_pattern == "all":
        suffix = "peer-a2a"
    return f"{slug}-{suffix}".replace(" ", "")


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
        n += grid + len(cfg.gap_fractions)
    if cfg.aligned:
        n += grid + len(cfg.gap_configs) * len(cfg.gap_fractions)
    return n


def sweep(cfg: CalibConfig, runner, *, progress: bool = True):
    """Run every phase on ``runner``. Returns (points, bursts) frames."""
    from tqdm import tqdm

    cfg = cfg.clipped(runner.sm_count)
    fma = getattr(runner, "supports_fma", True)
    bar = tqdm(total=plan_size(cfg, fma), desc=f"calibrate {cfg.target}", unit="cfg", file=sys.stderr,
               disable=not progress, dynamic_ncols=True)
    points, bursts = [], []

    pattern = {"peer_pattern": cfg.peer_pattern} if cfg.target == "peer" else {}   # a column on peer records

    def measure(phase, spec):
        frame, _info = runner.run(spec)
        row = {"phase": phase, "target": cfg.target, "mode": spec.mode, "gap_kind": spec.gap_kind,
               "producers": spec.producers, "bytes_per_producer": spec.bytes_per_producer,
               "volume_bytes": spec.volume_bytes, "gap_us": spec.gap_us, "fma_iters": spec.fma_iters,
               **pattern, **{k: v for k, v in summarize_run(frame).items()}}
        points.append(row)
        kept = _keep(frame, spec.producers, cfg.keep_producers).assign(phase=phase, **pattern)
        bursts.append(kept)
        bar.set_postfix_str(f"{phase} K={spec.producers} B={spec.bytes_per_producer // KiB}KiB "
                            f"T_iss={row['T_iss_us']:.2f}us")
        bar.update()
        return row

    def periodic(k, b, gap=0.0, **kw):
        return BurstSpec(k, b, gap, bursts=cfg.periodic_bursts(k * b), trials=cfg.trials, warmup=cfg.warmup, **kw)

    period0 = {}
    grid = sorted({(k, b) for k in cfg.producers for b in cfg.sizes} | set(cfg.gap_configs))
    for k, b in grid:
        period0[(k, b)] = measure("rate", periodic(k, b))["period_us"]
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
        k, b = cfg.gap_configs[0]
        for f in cfg.gap_fractions:
            measure("free-gap", periodic(k, b, f * period0[(k, b)], mode="free"))
    for k in cfg.iso_producers:
        for b in cfg.iso_sizes:
            measure("isolated", BurstSpec(k, b, 0.0, mode="isolated", bursts=cfg.iso_bursts, trials=cfg.trials,
                                          warmup=cfg.warmup, settle_us=cfg.settle_us))
    bar.close()
    return pd.DataFrame(points), pd.concat(bursts, ignore_index=True)


# --- fit -------------------------------------------------------------------------------------------

def _capacity_of(caps: dict, K):
    """Q(K) from fitted points with the Platform's rule (proportional below, linear, flat above)."""
    from xstage.sim.platform import Platform
    if not caps:
        return np.full(np.shape(K), np.inf)
    probe = Platform(name="probe", sm_count=max(caps), drain_rate_GBps=1.0, t_fixed_us=0.0, producer_issue_GBps=1.0,
                     capacity_points=tuple((k, max(q, 1.0)) for k, q in caps.items()))
    return np.array([probe.capacity_bytes(int(k)) for k in np.atleast_1d(K)], dtype=float)


def fit_platform(points: pd.DataFrame, *, name: str, target: str, sm_count: int, tensor_TFLOPs=None,
                 notes=None, iterations: int = 6):
    """Fit M_X from a points frame. Returns (Platform, fit dict).

    Large-gap plateau bursts start from a drained path just like isolated ones, so both obey Eq. 7:
    T = max(T_iss0, (V - Q)/R). T_iss0 is fitted to the points the capacity branch cannot explain
    (it predicts at least 15 % less than measured), R to the drain-dominated zero-gap points, Q(K)
    to the isolated and plateau points of each isolated K; the three fits alternate until stable.
    The first T_iss0 fit, before any Q is known, trims points measured > 1.3x its prediction.
    """
    from xstage.sim.platform import Platform

    points = points.dropna(subset=["T_iss_us"])
    points = points[points["T_iss_us"] > 0]
    free = points[points["phase"].isin(("plateau", "isolated"))]
    if len(free[free["phase"] == "plateau"]) < 3:
        raise InputError("points", len(free), "must hold >= 3 plateau points to fit T_iss0")
    iso = points[points["phase"] == "isolated"]
    if iso.empty:
        raise InputError("points", "isolated", "must hold isolated points to fit Q(K)")
    rate = points[(points["phase"] == "rate") & (points["period_us"] > 0)]
    K, B, V, T = (free[c].to_numpy(float) for c in ("producers", "bytes_per_producer", "volume_bytes", "T_iss_us"))

    def t0_fn(fit):
        inv_i = 0.0 if fit["injection_GBps"] is None else 1.0 / (fit["injection_GBps"] * 1e3)
        inv_p = 1.0 / (fit["producer_issue_GBps"] * 1e3)
        return lambda k, b: calib_fit._t0_model(np.asarray(k, float), np.asarray(b, float), fit["t_fixed_us"],
                                                inv_p, inv_i)

    use = np.ones(len(T), dtype=bool)
    for _ in range(4):                                  # one-sided trimming, before Q is known
        t0 = calib_fit.fit_issue_time0(K[use], B[use], T[use])
        keep = T <= 1.3 * t0_fn(t0)(K, B)
        if (keep == use).all() or keep.sum() < 3:
            break
        use = keep
    R = calib_fit.fit_drain_rate(rate["volume_bytes"], rate["period_us"])["R_Bpus"]
    caps, history = {}, []
    for _ in range(iterations):
        t0_of = t0_fn(t0)
        r = calib_fit.fit_drain_rate(rate["volume_bytes"], rate["period_us"], rate["T_iss_us"],
                                     t0_of(rate["producers"], rate["bytes_per_producer"]))
        R = r["R_Bpus"]
        fits = {}
        for k in sorted(set(iso["producers"])):
            grp = free[free["producers"] == k]
            fits[int(k)] = calib_fit.fit_capacity(grp["volume_bytes"], grp["T_iss_us"],
                                                  t0_of(grp["producers"], grp["bytes_per_producer"]), R)
        caps = {k: f["Q_bytes"] for k, f in fits.items()}
        explained = (V - _capacity_of(caps, K)) / R > T / calib_fit.KNEE_MARGIN
        use = ~explained
        if use.sum() >= 3:
            t0 = calib_fit.fit_issue_time0(K[use], B[use], T[use])
        state = (R, t0["t_fixed_us"], t0["producer_issue_GBps"], tuple(sorted(caps.items())))
        if history and np.allclose(np.array(state[:3], float), np.array(history[-1][:3], float), rtol=1e-6) \
                and state[3] == history[-1][3]:
            break
        history.append(state)
    t0["n_capacity_limited_excluded"] = int((~use).sum())
    fence = {}
    if "fence_us" in iso and iso["fence_us"].notna().any():   # drain seen by the sender: V / (start -> fence)
        for k, grp in iso.dropna(subset=["fence_us"]).groupby("producers"):
            big = grp.loc[grp["volume_bytes"].idxmax()]
            fence[int(k)] = float(big["volume_bytes"] / big["fence_us"] / 1e3)
    fit = {"T_iss0": t0, "R": r, "Q": fits, "iterations": len(history) + 1, "fence_rate_GBps": fence}
    notes = dict(notes or {})
    notes.update(fit_notes(fit))
    platform = Platform(name=name, sm_count=int(sm_count), drain_rate_GBps=R / 1e3, t_fixed_us=t0["t_fixed_us"],
                        producer_issue_GBps=t0["producer_issue_GBps"], injection_GBps=t0["injection_GBps"],
                        capacity_points=tuple((k, c["Q_bytes"]) for k, c in sorted(fits.items())),
                        target=target, tensor_TFLOPs=dict(tensor_TFLOPs or {}),
                        description=f"Calibrated by `xstage calibrate --target {target}`.", notes=notes)
    return platform, fit


def fit_notes(fit: dict) -> dict:
    t0, r, caps = fit["T_iss0"], fit["R"], fit["Q"]
    q_parts = []
    for k, c in sorted(caps.items()):
        text = (f"K={k}: Q={c['Q_bytes'] / MiB:.3f} MiB ({c['bound']}; {c['n_above_knee']}/{c['n_points']} points "
                f"above the knee; median |rel residual| {c['median_abs_rel_residual']:.1%}")
        if c.get("R_iso_Bpus") and c.get("Q_iso_bytes") is not None:
            text += (f"; free line fit above the knee: R_iso={c['R_iso_Bpus'] / 1e3:.1f} GB/s, "
                     f"Q_iso={c['Q_iso_bytes'] / MiB:.3f} MiB")
        q_parts.append(text + ")")
    used = ("whose issue time exceeds 1.2 T_iss0 (drain-dominated)" if r["drain_limited"] else
            "with the fastest rates: NO point was drain-dominated, so R is only a lower bound")
    ceiling = "none binds" if t0["injection_GBps"] is None else f"{t0['injection_GBps']:.1f} GB/s"
    return {
        "drain_rate_GBps": (f"R fitted to T_period = V/R on {r['n_used']} zero-gap periodic points {used}; "
                            f"median |rel residual| {r['median_abs_rel_residual']:.2%}; fastest measured rate "
                            f"{r['max_rate_Bpus'] / 1e3:.1f} GB/s."),
        "t_fixed_us + producer_issue_GBps": (
            f"T_iss0 = t_fixed + max(B/P, K B/I) fitted to {t0['n_points']} large-gap plateau and isolated points "
            f"that capacity does not explain ({t0.get('n_capacity_limited_excluded', 0)} capacity-limited points "
            f"left out); median "
            f"|rel residual| {t0['median_abs_rel_residual']:.2%}, max {t0['max_abs_rel_residual']:.2%}; "
            f"aggregate injection ceiling I: {ceiling}."),
        "capacity_points": "Q(K) fitted to isolated bursts with R fixed (Eq. 7): " + "; ".join(q_parts) + ".",
        "fence_rate_GBps": ("Isolated mode, largest burst per K: V / (burst start -> __threadfence_system done), "
                            "a sender-side view of the drain: "
                            + (", ".join(f"K={k}: {v:.1f} GB/s" for k, v in sorted(fit["fence_rate_GBps"].items()))
                               or "not measured") + "."),
    }


def check_and_summarize(points: pd.DataFrame, platform) -> tuple[pd.DataFrame, dict]:
    check = calib_fit.model_check(points, platform)
    errs = calib_fit.error_summary(check)
    kmax = max(k for k, _ in platform.capacity_points)
    summary = {"platform": platform.name, "target": platform.target, "R_GBps": platform.drain_rate_GBps,
               "T_iss0_us_at_32KiB": platform.issue_time0_us(kmax, 32 * KiB), "T_iss0_K": kmax,
               "Q_MiB": platform.capacity_bytes(kmax) / MiB, "Q_K": kmax,
               "t_fixed_us": platform.t_fixed_us, "producer_issue_GBps": platform.producer_issue_GBps,
               "injection_GBps": platform.injection_GBps, **errs,
               "Q_MiB_by_K": {str(k): q / MiB for k, q in platform.capacity_points}}
    if platform.target == "peer":   # records from before the pattern option ran "next"
        summary["peer_pattern"] = str(points["peer_pattern"].iloc[0]) if "peer_pattern" in points else "next"
    return check, summary


# --- the whole run and its files -------------------------------------------------------------------

FILES = ("platform.json", "bursts.parquet", "points.parquet", "check.parquet", "copy.parquet", "summary.json")


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
                    provenance_block: dict | None = None) -> dict:
    """Sweep on ``runner``, fit, check, write the output folder. Returns the summary dict."""
    out = Path(out_dir)
    if not overwrite:
        clash = [f for f in FILES if (out / f).exists()]
        if clash:
            raise InputError("--out", str(out), f"already holds {', '.join(clash)} (pass --overwrite)")
    t = time.perf_counter()
    points, bursts = sweep(cfg, runner, progress=progress)
    volumes = sorted(set(points.loc[points["phase"] == "rate", "volume_bytes"]))
    copy = runner.copy_engine(volumes) if cfg.copy_engine else pd.DataFrame()
    described = runner.describe()
    if provenance_block is None:
        from xstage.provenance import provenance
        provenance_block = provenance(with_gpu=described.get("runner") == "gpu")
    meta = {"config": asdict(cfg), "provenance": provenance_block, "runner": described,
            "link": _link_info(provenance_block.get("gpu", {}) or {}), "wall_s": time.perf_counter() - t}
    name = cfg.name or default_name(cfg.target, described.get("gpu_name", ""), cfg.peer_pattern)
    return finish(points, bursts, copy, meta, out, name=name, overwrite=overwrite)


def finish(points, bursts, copy, meta, out: Path, *, name: str, overwrite: bool) -> dict:
    """Fit + check + write (shared by a fresh run and ``--refit``)."""
    from xstage.records import atomic_write_text, save_records

    target = meta["config"]["target"]
    tensor = H200_TENSOR_TFLOPS if "H200" in str(meta["runner"].get("gpu_name", "")) else {}
    notes = {"provenance": meta["provenance"], "timer": meta["runner"].get("timer"), "link": meta["link"],
             "method": "xstage calibrate: see docs/calibration.md; raw records beside this file."}
    if tensor:
        notes["tensor_TFLOPs"] = "Dense H200 SXM datasheet rates (bf16 989.4, fp8 1978.9 TFLOP/s): leads, not measured."
    pattern = meta["config"].get("peer_pattern", "next") if target == "peer" else None
    if pattern:
        notes["peer_pattern"] = peer_pattern_note(pattern, (meta["runner"].get("target_info") or {}).get("world_size"))
    platform, fit = fit_platform(points, name=name, target=target,
                                 sm_count=int(meta["runner"].get("sm_count", 132)), tensor_TFLOPs=tensor, notes=notes)
    if pattern == "all":
        platform = dataclasses.replace(platform, description="Calibrated by `xstage calibrate --target peer "
                                       "--peer-pattern all` (all-to-all).")
    check, summary = check_and_summarize(points, platform)
    if len(copy):
        summary["copy_engine_GBps"] = float(copy["GBps"].max())
    summary["pcie_limit_GBps"] = meta["link"].get("pcie_limit_GBps") or meta["link"]["pcie_gen5_x16_GBps"]
    summary["timer_tick_ns"] = (meta["runner"].get("timer") or {}).get("tick_ns")
    summary["fit_Q"] = {str(k): {kk: vv for kk, vv in c.items() if kk != "residuals"} for k, c in fit["Q"].items()}
    summary["fence_rate_GBps"] = {str(k): v for k, v in fit["fence_rate_GBps"].items()}
    rate_pts = points[points["phase"] == "rate"]
    if "kernel_GBps" in rate_pts and rate_pts["kernel_GBps"].notna().any():   # bytes / CUDA-event kernel time
        summary["kernel_GBps_rate_max"] = float(rate_pts["kernel_GBps"].max())
        summary["kernel_GBps_rate_median"] = float(rate_pts["kernel_GBps"].median())
    free_pts = points[points["phase"] == "free-rate"]
    if len(free_pts):
        summary["free_rate_GBps_max"] = float((free_pts["volume_bytes"] / free_pts["period_us"]).max() / 1e3)
    summary["R_drain_dominated_points"] = int(fit["R"]["n_used"])
    summary["R_is_lower_bound"] = not fit["R"]["drain_limited"]
    model_errors = {k: summary[k] for k in summary if "rel_err" in k or k.startswith("n_")}
    platform = dataclasses.replace(platform, notes={**platform.notes, "model_check": model_errors})
    meta = {**meta, "platform": platform.name, "platform_hash": platform.content_hash}
    out.mkdir(parents=True, exist_ok=True)
    bursts = bursts.assign(platform=platform.name)
    save_records(out / "bursts.parquet", "burst", bursts, meta, overwrite=overwrite)
    save_records(out / "points.parquet", "point", points, meta, overwrite=overwrite)
    save_records(out / "check.parquet", "summary", check, meta, table="calibration_check", overwrite=overwrite)
    if len(copy):
        save_records(out / "copy.parquet", "kernel", copy, meta, overwrite=overwrite)
    platform.save(out / "platform.json", overwrite=overwrite)
    from xstage.cli import _clean
    atomic_write_text(out / "summary.json", json.dumps(_clean(summary), indent=2) + "\n", overwrite=overwrite)
    return summary


def refit(out_dir, *, name: str | None = None) -> dict:
    """Re-fit an existing output folder from its points.parquet (no GPU needed); rewrites the fit files."""
    from xstage.records import load_records

    out = Path(out_dir)
    points, meta = load_records(out / "points.parquet", "point")
    bursts, _ = load_records(out / "bursts.parquet", "burst")
    copy = load_records(out / "copy.parquet", "kernel")[0] if (out / "copy.parquet").exists() else pd.DataFrame()
    return finish(points, bursts, copy, meta, out, name=name or meta.get("platform") or "refit", overwrite=True)


def summarize_results(data_dir, platform: str | None = None):
    """Summary of committed calibration records under ``data_dir/calibration/<platform>/``."""
    from xstage.records import load_records
    from xstage.sim.platform import Platform

    root = Path(data_dir) / "calibration"
    found = sorted(p.parent.name for p in root.glob("*/platform.json")) if root.is_dir() else []
    if platform is not None and platform not in found:
        raise InputError("--platform", platform, f"has no calibration records under {root} "
                         f"(found: {', '.join(found) or 'none'})")
    if not found:
        raise InputError("data", str(root), "holds no calibration records (run `xstage calibrate`)")
    rows = []
    for name in ([platform] if platform else found):
        plat = Platform.load(root / name / "platform.json")
        points, _ = load_records(root / name / "points.parquet", "point")
        check, summary = check_and_summarize(points, plat)
        if (root / name / "copy.parquet").exists():
            copy, _ = load_records(root / name / "copy.parquet", "kernel")
            summary["copy_engine_GBps"] = float(copy["GBps"].max())
        rows.append(summary)
    return rows[0] if platform else rows
