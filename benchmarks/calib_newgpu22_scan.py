"""newgpu22 scan (session 22, POST HOC, decides nothing): after the recommended calibration missed on the H100
(``calib_newgpu22.py``), which of the product's laws meets the held-out targets on the H100's wide grids, and how do
the same laws do on the H200's wide grids? Each folder's points split by the product's default rule (``pairs``, 0.3,
seeds 0-4), each law fitted on the fit half (``calib_knee10.fit_model``, the product's ``fit_platform``), judged on
the held-out half (``calib_knee14.judge``). A law that passes here is a candidate only, for a rule written first.

    python benchmarks/calib_newgpu22_scan.py --json OUT     # 8 laws x 4 folders x 5 seeds = 160 fits; ~30 min
    python benchmarks/calib_newgpu22_scan.py --instrument --json OUT   # the two host runs against each other; ~5 s
    python benchmarks/calib_newgpu22_scan.py --insample --json OUT     # each law fitted on every point; ~5 min
    python benchmarks/calib_newgpu22_scan.py --gpus --json OUT         # the two GPUs' wide host points side by side

``--gpus``: the H100's and the H200's wide host grids (the same grid, ``h100-pcie-host`` and ``h200-pcie-host-wide``)
point for point: the ratio of the measured T_iss per phase (median over the (K, B) pairs both measured), and per K
the capacity a backpressured isolated burst sees, V - R T_iss (R each run's fitted drain rate; backpressured: T_iss
over 0.3 V/R), the median over B.

``--insample``: lawscan18's upper bound on the H100's wide host and local grids: each law fitted on EVERY point of the
folder (its held-out pairs included), judged on each ``pairs`` seed's held-out half. A law that misses here cannot
pass that grid from any fit half.

``--instrument``: the H100's first call measured the wide host grid twice (``h100-pcie-host``, ``-r2``); on each
``pairs`` seed's held-out half of run 1, each run's points as the prediction of the other's, matched point for point
(``calib_knee18.matched`` / ``instrument_heldout``, knee18's instrument figure): whether the instrument itself meets
issue 15's targets where the model missed.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import FIGS, FRACTION, SEEDS, all_four  # noqa: E402
from calib_knee10 import fit_model, refuse_existing, write_new  # noqa: E402
from calib_knee14 import judge  # noqa: E402
from calib_knee18 import heldout_mask, instrument_heldout, matched  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim.split_sweeps import split_by_rule  # noqa: E402

EXTRA = Path(__file__).resolve().parents[1] / "data" / "calibration-extra"
FOLDERS = {"h100-pcie-host": "host", "h100-local": "local", "h200-pcie-host-wide": "host", "h200-local-wide": "local"}
LAWS = ("v1", "two-stage-gated", "two-stage-gated2", "two-stage-gated3", "two-stage-knee2", "two-stage-state",
        "two-stage-kneek", "two-stage-lockq")


def _points(folder: str):
    """A folder's points, its recorded split left out (each study makes its own)."""
    points, _ = load_records(EXTRA / folder / "points.parquet", "point")
    return points.drop(columns=["split"], errors="ignore").reset_index(drop=True)


def _judged(folder: str, law: str, seed: int, plat, points, split) -> dict:
    """One row: ``plat`` judged on ``split``'s held-out half, the four figures and whether all four hold."""
    j = judge(plat, points, split)
    r = {"folder": folder, "law": law, "seed": seed, **{f"heldout_{k}": j[f"heldout_{k}"] for k in FIGS},
         "misses": j["misses"]}
    r["all_four"] = all_four(r)
    return r


def _log_law(rows: list, folder: str, law: str, label: str, log) -> None:
    mine = [r for r in rows if (r["folder"], r["law"]) == (folder, law) and "error" not in r]
    med = [r["heldout_median_rel_err_T_iss"] for r in mine]
    p90 = [r["heldout_p90_rel_err_T_iss"] for r in mine]
    nan = float("nan")
    log(f"{folder:22s} {law:18s} {label}seeds met {sum(r['all_four'] for r in mine)}/{len(SEEDS)}, T_iss median "
        f"{min(med, default=nan):.1%}-{max(med, default=nan):.1%}, p90 {min(p90, default=nan):.1%}-"
        f"{max(p90, default=nan):.1%}", flush=True)


def _fitted(rows: list, folder: str, law: str, seed, frame, target: str):
    """``fit_model`` of ``law`` on ``frame``, or None with the failure recorded as a row (not hidden)."""
    try:
        return fit_model(frame, law, f"scan-{folder}", target)[0]
    except Exception as exc:   # a law that cannot fit this frame
        rows.append({"folder": folder, "law": law, **({} if seed is None else {"seed": seed}),
                     "error": f"{type(exc).__name__}: {exc}"})
        return None


def scan(folders=FOLDERS, laws=LAWS, log=print) -> list:
    rows = []
    for folder, target in folders.items():
        points = _points(folder)
        for law in laws:
            for seed in SEEDS:
                split = split_by_rule(points, "pairs", FRACTION, seed)
                plat = _fitted(rows, folder, law, seed, points[split.to_numpy() == "fit"], target)
                if plat is not None:
                    rows.append(_judged(folder, law, seed, plat, points, split))
            _log_law(rows, folder, law, "", log)
    return rows


def insample(folders=("h100-pcie-host", "h100-local"), laws=LAWS, log=print) -> list:
    """Each law fitted on every point of each folder, judged on the ``pairs`` seeds' held-out halves."""
    rows = []
    for folder in folders:
        points = _points(folder)
        for law in laws:
            plat = _fitted(rows, folder, law, None, points, FOLDERS[folder])
            if plat is None:
                continue
            for seed in SEEDS:
                rows.append(_judged(folder, law, seed, plat, points, split_by_rule(points, "pairs", FRACTION, seed)))
            _log_law(rows, folder, law, "in-sample ", log)
    return rows


def gpus(h100="h100-pcie-host", h200="h200-pcie-host-wide") -> dict:
    """Per phase, the H100/H200 ratio of the measured T_iss; per K, the backpressured isolated capacity (MiB)."""
    import pandas as pd

    pts, rate = {}, {}
    for name in (h100, h200):
        pts[name], _ = load_records(EXTRA / name / "points.parquet", "point")
        rate[name] = json.loads((EXTRA / name / "summary.json").read_text())["R_GBps"] * 1e3   # bytes per us
    key = ["phase", "mode", "producers", "bytes_per_producer"]
    ratios = {}
    for phase in pts[h100]["phase"].unique():
        a, b = (pts[n][pts[n]["phase"] == phase].groupby(key)["T_iss(us)"].median() for n in (h100, h200))
        r = (a / b).dropna()
        if len(r):
            ratios[str(phase)] = {"n_pairs": int(len(r)), "median": float(r.median()), "p10": float(r.quantile(0.1)),
                                  "p90": float(r.quantile(0.9))}
    capacity = {}
    for name in (h100, h200):
        iso = pts[name][pts[name]["phase"] == "isolated"]
        V = iso["producers"] * iso["bytes_per_producer"]
        held = iso["T_iss(us)"] > 0.3 * V / rate[name]
        q = ((V - rate[name] * iso["T_iss(us)"]) / 2**20)[held]
        capacity[name] = {int(k): float(v) for k, v in q.groupby(iso["producers"][held]).median().items()}
    return {"t_iss_ratio_h100_over_h200": ratios, "backpressured_isolated_capacity_MiB": capacity,
            "R_GBps": {n: rate[n] / 1e3 for n in rate}, "pandas": pd.__version__}


def instrument(first="h100-pcie-host", second="h100-pcie-host-r2", log=print) -> list:
    """Per ``pairs`` seed: the two runs' lockstep points on run 1's held-out pairs, each the other's prediction."""
    runs = {name: _points(name) for name in (first, second)}
    m, rows = matched(runs), []
    for seed in SEEDS:
        split = split_by_rule(runs[first], "pairs", FRACTION, seed).to_numpy()
        held = {(int(k), int(b)) for k, b, x in zip(runs[first]["producers"], runs[first]["bytes_per_producer"], split)
                if x == "heldout"}
        mask = heldout_mask(m, held)
        r = {"seed": seed, "n_points": int(mask.sum()), **instrument_heldout(m, (first, second), mask)}
        rows.append(r)
        log(f"seed {seed}: T_iss {r['median_T_iss']:.1%} / {r['p90_T_iss']:.1%}, period {r['median_period']:.1%} / "
            f"{r['p90_period']:.1%} (n {r['n_points']})")
    return rows


def summary(rows) -> dict:
    out = {}
    for law in dict.fromkeys(r["law"] for r in rows):
        out[law] = {f: sum(r.get("all_four", False) for r in rows if (r["law"], r["folder"]) == (law, f))
                    for f in dict.fromkeys(r["folder"] for r in rows)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--instrument", action="store_true", help="the two host runs against each other (no fits)")
    ap.add_argument("--insample", action="store_true", help="each law fitted on every point (an upper bound)")
    ap.add_argument("--gpus", action="store_true", help="the two GPUs' wide host points side by side (no fits)")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_newgpu22_scan")
    if args.gpus:
        g = gpus()
        print(json.dumps(g, indent=1))
        write_new(args.json, {"post_hoc": True, "note": "the H100's and the H200's wide host grids side by side; "
                              "decides nothing", **g, "provenance": provenance()}, "calib_newgpu22_scan")
        return 0
    if args.insample:
        rows = insample()
        write_new(args.json, {"post_hoc": True, "note": "each law fitted on every point of the H100's wide folders, "
                              "judged on the pairs split's held-out halves, seeds 0-4; an upper bound; decides nothing",
                              "summary": summary(rows), "rows": rows, "provenance": provenance()}, "calib_newgpu22_scan")
        return 0
    if args.instrument:
        write_new(args.json, {"post_hoc": True, "note": "the H100's two wide host runs of one call, each predicting the "
                              "other on run 1's pairs-split held-out halves; decides nothing", "rows": instrument(),
                              "provenance": provenance()}, "calib_newgpu22_scan")
        return 0
    rows = scan()
    s = summary(rows)
    for law, v in s.items():
        print(f"{law:18s} {v}")
    write_new(args.json, {"post_hoc": True, "note": "each law on each wide folder's pairs split, seeds 0-4; decides "
                          "nothing", "summary": s, "rows": rows, "provenance": provenance()}, "calib_newgpu22_scan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
