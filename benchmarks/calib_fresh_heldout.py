"""A fresh calibration run scored against models fitted on the committed wide records (issue 15, session 7).

    python benchmarks/calib_fresh_heldout.py --fresh-host DIR --fresh-local DIR [--json OUT]

Pre-registered (committed before the device run; the commit is named in the record): the platforms fitted on
the *fit* half of the committed wide records (``data/calibration-extra/h200-{pcie-host,local}-wide*``, recorded
split: fraction 0.3, seed 0) by three models --

- ``v1``: ``h200-*-wide/platform.json`` (the folders' own fit);
- ``two-stage-relax``: ``h200-*-wide-two-stage-relax/platform.json``;
- ``two-stage-gated``: ``h200-*-wide-two-stage-gated/platform.json`` (the model proposed in session 7: the
  relaxing two-stage law, with only (K, B) pairs whose zero-gap lockstep run waited for the drain read as
  backpressured; ``xstage.sim.platform_fit.drain_seen_pairs``).

The device run: ``xstage calibrate --target host|local --grid fresh --model two-stage-gated`` (every K of the
``fresh`` grid is new, so no (K, B) pair of it was measured before; its own split: fraction 0.3, seed 0). Scored:

1. ``preregistered``: each pre-registered platform's model check on *every* fresh point (nothing of the fresh run
   fitted);
2. ``fresh_split``: each model fitted on the fresh run's fit half and judged on its held-out half.

Figures: |relative error| median / p90 of T_iss and period on lockstep periodic points (the issue's targets:
median <= 5 %, p90 <= 15 %), isolated T_iss, free-running T_iss and period (reported apart).
"""

import argparse
import json
import sys
from pathlib import Path

from xstage.records import load_records
from xstage.sim import fit as calib_fit
from xstage.sim.platform import Platform
from xstage.sim.platform_fit import capacity_law_of, check_and_summarize, fit_split_platform

EXTRA = Path(__file__).resolve().parent.parent / "data" / "calibration-extra"
MODEL_FOLDERS = {"v1": "h200-{t}-wide", "two-stage-relax": "h200-{t}-wide-two-stage-relax",
                 "two-stage-gated": "h200-{t}-wide-two-stage-gated"}
TARGETS = {"host": "pcie-host", "local": "local"}
KEYS = ("median_rel_err_T_iss", "p90_rel_err_T_iss", "median_rel_err_period", "p90_rel_err_period",
        "isolated_median_rel_err_T_iss", "isolated_p90_rel_err_T_iss", "free_median_rel_err_T_iss",
        "free_p90_rel_err_T_iss", "free_median_rel_err_period", "free_p90_rel_err_period", "n_points",
        "n_isolated_points", "n_free_points")


POINT_COLUMNS = ("phase", "mode", "gap_kind", "producers", "bytes_per_producer", "gap(us)", "gap_measured(us)",
                 "T_iss(us)", "period(us)", "split")


def load_points(folder: Path):
    """(points, metadata) of a calibration folder: its points.parquet, else the measured columns of its
    check.parquet (one row per configuration, the split recorded; the first device call of session 7 brought
    back check.parquet but not points.parquet for the local target)."""
    if (folder / "points.parquet").is_file():
        return load_records(folder / "points.parquet", "point")
    check, meta = load_records(folder / "check.parquet", "summary")
    points = check[list(POINT_COLUMNS)].copy()
    points["volume(bytes)"] = points["producers"] * points["bytes_per_producer"]
    return points, {**meta, "points_from": "check.parquet"}


def preregistered_platform(target: str, model: str) -> Platform:
    return Platform.load(EXTRA / MODEL_FOLDERS[model].format(t=TARGETS[target]) / "platform.json")


def score_preregistered(points, target: str) -> dict:
    """Every pre-registered platform on every fresh point."""
    out = {}
    for model in MODEL_FOLDERS:
        errs = calib_fit.error_summary(calib_fit.model_check(points, preregistered_platform(target, model)))
        out[model] = {k: errs[k] for k in KEYS}
    return out


def score_fresh_split(points, target: str) -> dict:
    """Each model fitted on the fresh run's recorded fit half, judged on its held-out half."""
    split = points["split"]
    out = {}
    for model in MODEL_FOLDERS:
        platform, _ = fit_split_platform(points, split, name=f"fresh-{model}", target=target, sm_count=132,
                                         capacity_law=capacity_law_of(model))
        _, s = check_and_summarize(points, platform, split)
        out[model] = {f"{part}_{k}": s.get(f"{part}_{k}") for part in ("fit", "heldout") for k in KEYS}
        out[model].update(heldout_n_pairs=s["heldout_n_pairs"], fit_n_pairs=s["fit_n_pairs"],
                          platform=platform.to_dict())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fresh-host", type=Path, default=None)
    ap.add_argument("--fresh-local", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    result = {"preregistered_platforms": {m: f.format(t="{pcie-host,local}") for m, f in MODEL_FOLDERS.items()}}
    for target, folder in (("host", args.fresh_host), ("local", args.fresh_local)):
        if folder is None:
            continue
        points, meta = load_points(folder)
        result[target] = {"records": str(folder), "provenance": meta.get("provenance"),
                          "points_from": meta.get("points_from", "points.parquet"),
                          "preregistered": score_preregistered(points, target),
                          "fresh_split": score_fresh_split(points, target)}
        for part in ("preregistered", "fresh_split"):
            for model, f in result[target][part].items():
                pre = "" if part == "preregistered" else "heldout_"
                print(f"{target:5s} {part:13s} {model:16s} T_iss {f[pre + 'median_rel_err_T_iss']:.1%} / "
                      f"{f[pre + 'p90_rel_err_T_iss']:.1%}  period {f[pre + 'median_rel_err_period']:.1%} / "
                      f"{f[pre + 'p90_rel_err_period']:.1%}  (n = {f[pre + 'n_points']})")
    if args.json is not None:
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str))
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
