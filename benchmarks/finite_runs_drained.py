"""Lockstep finite runs predicted as run, drained time included (issue 15, item 4; session 8): pre-registration
and scoring.

    python benchmarks/finite_runs_drained.py predict OUT.json         # before the device run (committed)
    python benchmarks/finite_runs_drained.py score RUN_DIR PRED.json OUT.json

``GRID``: fresh lockstep zero-gap runs of N bursts from an empty path, host and local, (K, B) pairs none of
which is in the wide grid the platforms were fitted on, N from 4 to 256, drain-bound runs (V / R above
T_iss + barrier) and runs the barrier paces (``predict`` says which). Measured by
``benchmarks/gpu/lockstep_drained.py`` (``TRIALS`` trials after ``WARMUP``, medians over the second half as
``xstage calibrate`` reports them; drained: the latest end fence after the last burst from the earliest
first start; each figure the median over trials).

Predictions (``predict``), per run and platform: ``xstage sim bursts -p PLATFORM -K K -B B -G 0 -n N --mode
lockstep --barrier-us X --skip N/2 --json`` run through the CLI's own entry point; ``T_iss_us``, ``period_us``,
``drained_us``. X: the barrier of the platform's own grid (``finite_runs.barrier_of``: the median period -
T_iss of the wide grid's fitted zero-gap points with no drain in them). Platforms: the committed
``*-wide-two-stage-gated`` (the rule's platforms) and, beside them, the wide grids' v1. Nothing is fitted.

Score (``score``): |relative error| of each figure per run; per target and platform the median, p90 and the share
of runs within 10 % (the target: medians and drained_us within 10 %).
"""

import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import finite_runs as fr  # noqa: E402

KiB = 1024
EXTRA = Path("data/calibration-extra")
TRIALS, WARMUP = 5, 1
_PAIRS = [(6, 96, 8), (6, 3, 64), (10, 40, 16), (12, 6, 128), (12, 192, 8), (20, 12, 32), (20, 56, 16),
          (28, 2, 256), (28, 160, 4), (40, 20, 64), (40, 3, 32), (44, 96, 8), (56, 6, 64), (56, 40, 16),
          (72, 10, 128), (72, 28, 8), (80, 192, 4), (104, 5, 64), (104, 56, 16), (120, 12, 32), (120, 96, 8),
          (132, 3, 128), (132, 40, 16), (132, 160, 6),
          (4, 6, 32), (8, 5, 64), (10, 3, 128), (16, 4, 16), (24, 2, 64), (6, 10, 8)]   # small V: barrier-paced on host
GRID = {t: [[K, B * KiB, n] for K, B, n in _PAIRS] for t in ("host", "local")}
PLATFORMS = {
    "host": {"two-stage-gated": "h200-pcie-host-wide-two-stage-gated", "v1": "h200-pcie-host-wide"},
    "local": {"two-stage-gated": "h200-local-wide-two-stage-gated", "v1": "h200-local-wide"},
}
GRIDS = {"host": "h200-pcie-host-wide", "local": "h200-local-wide"}
FIGURES = ("T_iss_us", "period_us", "drained_us")


def _cli(argv: list[str]) -> dict:
    """``xstage ARGV --json`` through the CLI's entry point; its JSON answer."""
    from xstage.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv + ["--json"])
    if rc != 0:
        raise RuntimeError(f"xstage {' '.join(argv)} exited {rc}")
    return json.loads(buf.getvalue())


def predict() -> dict:
    from xstage.sim.platform import load_platform
    out = {"rule": "xstage sim bursts --mode lockstep --barrier-us X --skip N/2 (barrier: finite_runs.barrier_of on "
                   "the platform's wide grid)", "trials": TRIALS, "warmup": WARMUP, "grid": GRID, "predictions": {}}
    for target, plats in PLATFORMS.items():
        for label, folder in plats.items():
            path = EXTRA / folder / "platform.json"
            barrier = fr.barrier_of(EXTRA / GRIDS[target], load_platform(path))
            runs = []
            for K, B, n in GRID[target]:
                s = _cli(["sim", "bursts", "-p", str(path), "-K", str(K), "-B", str(B), "-G", "0", "-n", str(n),
                          "--mode", "lockstep", "--barrier-us", repr(barrier), "--skip", str(n // 2)])
                V_over_R = K * B / load_platform(path).drain_rate_Bpus
                runs.append({"K": K, "B": B, "n": n, **{f: s[f] for f in FIGURES}, "engine": s["engine"],
                             "drain_bound": bool(V_over_R > s["T_iss_us"] + barrier)})
            out["predictions"][f"{target} {label}"] = {"platform": str(path), "barrier_us": barrier, "runs": runs}
    return out


def _errs(e) -> dict:
    e = np.asarray(e, float)
    return {"median_rel_err": float(np.median(e)), "p90_rel_err": float(np.percentile(e, 90)),
            "within_10pct": float(np.mean(e <= 0.10)), "n": int(len(e))}


def measured(run_dir: Path) -> pd.DataFrame:
    runs = pd.read_csv(run_dir / "runs.csv")
    return runs.groupby(["target", "K", "B", "n"], as_index=False)[list(FIGURES) + ["kernel_us"]].median()


def score(run_dir: Path, pred: dict) -> dict:
    meas = measured(run_dir)
    out = {"run_dir": str(run_dir), "predictions_rule": pred["rule"], "scores": {}}
    for key, p in pred["predictions"].items():
        target = key.split()[0]
        m = meas[meas["target"] == target].set_index(["K", "B", "n"])
        rows = []
        for r in p["runs"]:
            k = (r["K"], r["B"], r["n"])
            if k not in m.index:
                continue
            row = {"K": r["K"], "B": r["B"], "n": r["n"], "drain_bound": r["drain_bound"]}
            for f in FIGURES:
                row[f"{f}_pred"], row[f"{f}_meas"] = r[f], float(m.loc[k, f])
                row[f"{f}_rel_err"] = (r[f] - row[f"{f}_meas"]) / row[f"{f}_meas"]
            rows.append(row)
        f = pd.DataFrame(rows)
        res = {"barrier_us": p["barrier_us"], "n_runs": len(f), "runs": rows}
        for sub, g in (("all", f), ("drain_bound", f[f["drain_bound"]]), ("barrier_paced", f[~f["drain_bound"]])):
            if len(g):
                res[sub] = {fig: _errs(g[f"{fig}_rel_err"].abs()) for fig in FIGURES}
        out["scores"][key] = res
    return out


def _write(dest: Path, obj: dict) -> None:
    tmp = dest.with_suffix(dest.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=float) + "\n")
    tmp.replace(dest)


def _posthoc_dest(argv: list[str], script: str, out: str) -> Path | None:
    """The ``out`` path of ``script posthoc OUT``, or None after one line on stderr (the usage, or that the path
    exists: records are never overwritten)."""
    if len(argv) != 2 or argv[0] != "posthoc":
        print(f"usage: {script} posthoc {out}", file=sys.stderr)
        return None
    dest = Path(argv[1])
    if dest.exists():
        print(f"{out}={dest}: exists (records are never overwritten)", file=sys.stderr)
        return None
    return dest


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = "usage: finite_runs_drained.py predict OUT.json | score RUN_DIR PRED.json OUT.json"
    if not argv or argv[0] not in ("predict", "score") or len(argv) != {"predict": 2, "score": 4}[argv[0]]:
        print(usage, file=sys.stderr)
        return 2
    dest = Path(argv[-1])
    if dest.exists():
        print(f"{dest}: exists (records are never overwritten)", file=sys.stderr)
        return 2
    from xstage.provenance import provenance
    if argv[0] == "predict":
        obj = predict()
    else:
        run_dir, pred_path = Path(argv[1]), Path(argv[2])
        if not (run_dir / "runs.csv").is_file():
            print(f"RUN_DIR: {run_dir} holds no runs.csv (a lockstep_drained.py output folder)", file=sys.stderr)
            return 2
        obj = score(run_dir, json.loads(pred_path.read_text()))
        for key, s in obj["scores"].items():
            for sub in ("all", "drain_bound", "barrier_paced"):
                if sub in s:
                    print(f"{key} {sub} (n={s[sub]['T_iss_us']['n']}):" + "".join(
                        f" {fig} {s[sub][fig]['median_rel_err']:.1%} / {s[sub][fig]['p90_rel_err']:.1%} "
                        f"({s[sub][fig]['within_10pct']:.0%});" for fig in FIGURES))
    obj["provenance"] = provenance(with_gpu=False)
    _write(dest, obj)
    return 0


if __name__ == "__main__":
    sys.exit(main())
