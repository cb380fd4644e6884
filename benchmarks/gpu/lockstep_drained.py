"""Lockstep finite runs with their drained time (issue 15, item 4; session 8): N bursts from an empty path.

    python benchmarks/gpu/lockstep_drained.py --out DIR [--targets host,local] [--budget-s 150] [--probe]

Each run of the pre-registered grid (``benchmarks/finite_runs_drained.py``, ``GRID``) is the calibration's
lockstep zero-gap run (``BurstSpec`` mode ``periodic``: a fenced grid barrier before every burst, 16-byte
stores, one CTA per SM, fresh addresses) of N bursts, with the microbenchmark's end fence (``end_fence``:
after the last burst's issue end every thread runs __threadfence_system, thread 0 reads %globaltimer), so a
trial's drained time is the latest producer's end fence from the earliest first start. Per run: ``warmup``
discarded trials, then ``trials``; ``summarize_run`` gives T_iss and period medians over the second half (as
``xstage calibrate`` reports them). Every trial's pattern is checked on the device (``Microbench.run``).

Writes DIR/runs.csv (one row per run and trial: T_iss / period medians of that trial, drained, kernel time),
DIR/bursts.csv.gz (per run, trial and burst: earliest / latest start, earliest / median / latest issue end:
the start skew), DIR/meta.json (provenance, grid, timer, what was skipped for the budget).

``--probe`` (session 12, skew17; off by default, and without it nothing above changes): per target, in the same
process and before that target's grid, one run per distinct K of the grid at ``PROBE_B`` = 2 KiB and ``PROBE_N`` =
64 bursts (the same kernel, trials and warm-up as the grid's runs): the barrier's start skew at each K, measured
just before the runs it stands for. Written as DIR/probe/runs.csv and DIR/probe/bursts.csv.gz (the schema above,
so ``finite_skew.skews(DIR / "probe")`` reads it) and the probe's runs in meta.json.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from finite_runs_drained import GRID, TRIALS, WARMUP  # noqa: E402  the pre-registered grid
from xstage.hw.microbench.spec import BurstSpec  # noqa: E402  (pure: no GPU library)

BUFFER_BYTES = 320 * 2**20
PROBE_B, PROBE_N = 2048, 64


def probe_runs(grid: list) -> list[list[int]]:
    """The probe's runs for one target's grid: one (K, PROBE_B, PROBE_N) per distinct K, in ascending K."""
    return [[K, PROBE_B, PROBE_N] for K in sorted({int(K) for K, _, _ in grid})]


def _per_trial(frame: pd.DataFrame) -> list[dict]:
    from xstage.sim.burst_summary import summarize_run
    rows = []
    for trial, t in frame.groupby("trial"):
        s = summarize_run(t)
        rows.append({"trial": int(trial), "T_iss_us": s["T_iss(us)"], "period_us": s["period(us)"],
                     "drained_us": float(t["end_fence(us)"].max()), "kernel_us": float(t["kernel(us)"].iloc[0]),
                     "T_iss_producer_us": s["T_iss_producer(us)"]})
    return rows


def _bursts(frame: pd.DataFrame) -> pd.DataFrame:
    end = frame["start(us)"] + frame["issue(us)"]
    g = frame.assign(end=end).groupby(["trial", "burst"])
    return pd.DataFrame({"start_min_us": g["start(us)"].min(), "start_max_us": g["start(us)"].max(),
                         "end_min_us": g["end"].min(), "end_median_us": g["end"].median(),
                         "end_max_us": g["end"].max()}).reset_index()


def _measure(mb, target: str, runs: list, t0: float, budget_s: float, rows: list, bursts: list,
             skipped: list, label: str = "") -> None:
    """Each (K, B, n) of ``runs`` on ``mb``: per-trial rows onto ``rows``, per-burst starts / ends onto ``bursts``;
    a run not started within ``budget_s`` of ``t0`` onto ``skipped``."""
    for K, B, n in runs:
        if time.perf_counter() - t0 > budget_s:
            skipped.append([target, K, B, n])
            continue
        spec = BurstSpec(K, B, 0.0, mode="periodic", bursts=n, trials=TRIALS, warmup=WARMUP, end_fence=True)
        t = time.perf_counter()
        frame, info = mb.run(spec)
        key = {"target": target, "K": K, "B": B, "n": n}
        rows += [{**key, **r, "slots": info["slots"]} for r in _per_trial(frame)]
        bursts.append(_bursts(frame).assign(**key))
        print(f"{label}{target} K={K} B={B} n={n}: T_iss {np.median([r['T_iss_us'] for r in rows[-TRIALS:]]):.3f} us, "
              f"period {np.median([r['period_us'] for r in rows[-TRIALS:]]):.3f} us, drained "
              f"{np.median([r['drained_us'] for r in rows[-TRIALS:]]):.1f} us ({time.perf_counter() - t:.2f} s)",
              flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--targets", default="host,local")
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop starting runs after this many seconds")
    ap.add_argument("--probe", action="store_true",
                    help=f"before each target's grid, one run per K at B={PROBE_B}, n={PROBE_N} (DIR/probe/)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    if out.exists() and any(out.iterdir()):
        print(f"--out: {out} is not empty (records are never overwritten)", file=sys.stderr)
        return 2
    targets = a.targets.split(",")
    for t in targets:
        if t not in GRID:
            print(f"--targets: {t!r} is not one of {', '.join(GRID)}", file=sys.stderr)
            return 2
    out.mkdir(parents=True, exist_ok=True)
    from xstage.hw.common.targets import open_target
    from xstage.hw.microbench.runner import Microbench
    from xstage.provenance import provenance
    t0 = time.perf_counter()
    rows, bursts, skipped, timers = [], [], [], {}
    probe_rows, probe_bursts, probe_skipped = [], [], []
    for target in targets:
        mb = Microbench(open_target(target, BUFFER_BYTES))
        timers[target] = mb.probe_timer()
        if a.probe:
            _measure(mb, target, probe_runs(GRID[target]), t0, a.budget_s, probe_rows, probe_bursts,
                     probe_skipped, "probe ")
        _measure(mb, target, GRID[target], t0, a.budget_s, rows, bursts, skipped)
        mb.close()
    pd.DataFrame(rows).to_csv(out / "runs.csv", index=False)
    pd.concat(bursts, ignore_index=True).to_csv(out / "bursts.csv.gz", index=False)
    if a.probe:
        (out / "probe").mkdir()
        pd.DataFrame(probe_rows).to_csv(out / "probe" / "runs.csv", index=False)
        if probe_bursts:
            pd.concat(probe_bursts, ignore_index=True).to_csv(out / "probe" / "bursts.csv.gz", index=False)
    meta = {"what": "lockstep zero-gap finite runs with an end fence (benchmarks/gpu/lockstep_drained.py)",
            "grid": GRID, "trials": TRIALS, "warmup": WARMUP, "buffer_bytes": BUFFER_BYTES, "timer": timers,
            "skipped_for_budget": skipped, "wall_s": time.perf_counter() - t0, "provenance": provenance(with_gpu=True)}
    if a.probe:
        meta["probe"] = {"runs": {t: probe_runs(GRID[t]) for t in targets}, "B": PROBE_B, "n": PROBE_N,
                         "when": "per target, in this process, before that target's grid",
                         "skipped_for_budget": probe_skipped}
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
