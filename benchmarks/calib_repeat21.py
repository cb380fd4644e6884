"""repeat21 (session 21): does fresh16's result hold in a second call, and does the instrument agree with itself
across calls? The cross-call score frozen in data/calibration-extra/fresh16-repeat-preregistration.md (written with
this script, before the second call).

    python benchmarks/calib_repeat21.py --json OUT      # no fits; ~5 s

The two calls are two ``xstage calibrate --repeat 2`` folders of one grid (``--first``, default
h200-pcie-host-fresh16; ``--second``, default h200-pcie-host-fresh16-r2); each call's points.parquet is the
point-wise median of its two runs. Per ``bracket`` seed s, on the held-out half of the SECOND call's median
(``calib_knee18.held_pairs_of``, the split combo18's score of that folder uses), lockstep periodic points matched by
(phase, mode, K, B, step) (``calib_knee18.matched``): one call's median as the prediction of the other's, both ways,
median and p90 of |e|, the figure the median over the two (``calib_knee18.instrument_heldout``); the verdict by
knee18's rule (``calib_knee18.verdict``): "beyond the instrument" iff the T_iss p90 > 0.15 at >= 2 of 5 seeds,
"within the instrument" iff all four checks hold at >= 4 of 5, else "at the edge". Beside it, judging nothing: the
same within each call (its r1 against its r2) and ``calib_fresh14.agreement`` of the two medians over every point.
The JSON is written atomically and a file already there is never overwritten.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import SEEDS  # noqa: E402
from calib_fresh14 import agreement, runs_of  # noqa: E402
from calib_knee10 import refuse_existing, write_new  # noqa: E402
from calib_knee18 import heldout_mask, held_pairs_of, instrument_heldout, matched, verdict  # noqa: E402
from calib_pool18 import EXTRA  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402

RULE = "data/calibration-extra/fresh16-repeat-preregistration.md"


def median_of(folder: Path):
    points, _ = load_records(folder / "points.parquet", "point")
    return points.drop(columns=["split", "n_runs"], errors="ignore").reset_index(drop=True)


def _rows(m, names, second, log, label):
    rows = []
    for seed in SEEDS:
        mask = heldout_mask(m, held_pairs_of(second, seed))
        r = {"seed": seed, "n_points": int(mask.sum()), **instrument_heldout(m, names, mask)}
        rows.append(r)
        log(f"{label:14s} seed {seed}: T_iss {r['median_T_iss']:.1%} / {r['p90_T_iss']:.1%}, period "
            f"{r['median_period']:.1%} / {r['p90_period']:.1%} (n {r['n_points']})")
    return rows


def score(first: Path, second: Path, log=print) -> dict:
    a, b = median_of(first), median_of(second)
    held_on = b.reset_index(drop=True)
    cross = _rows(matched({"call1": a, "call2": b}), ("call1", "call2"), held_on, log, "across calls")
    within = {}
    for name, folder in (("call1", first), ("call2", second)):
        runs = runs_of(folder)
        within[name] = _rows(matched(runs), tuple(runs), held_on, log, f"within {name}")
    return {"pre_registered": True, "rule": RULE, "first": str(first), "second": str(second),
            "verdict": verdict(cross), "across_calls": cross,
            "beside": {"within_each_call": {k: {"verdict": verdict(v), "rows": v} for k, v in within.items()},
                       "medians_every_point": agreement(a, b)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--first", type=Path, default=EXTRA / "h200-pcie-host-fresh16")
    ap.add_argument("--second", type=Path, default=EXTRA / "h200-pcie-host-fresh16-r2")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_repeat21")
    grids = []
    for f in (args.first, args.second):
        if not (f / "points-runs.parquet").is_file():
            print(f"calib_repeat21: error: {f} holds no points-runs.parquet (a --repeat folder)", file=sys.stderr)
            raise SystemExit(2)
        grids.append((load_records(f / "points.parquet", "point")[1].get("config") or {}).get("grid"))
    if grids[0] != grids[1]:
        print(f"calib_repeat21: error: --second {args.second} is grid {grids[1]}, --first grid {grids[0]} (one grid, "
              "two calls)", file=sys.stderr)
        raise SystemExit(2)
    out = score(args.first, args.second)
    print(f"across calls: {out['verdict']}")
    write_new(args.json, {**out, "provenance": provenance()}, "calib_repeat21")
    return 0


if __name__ == "__main__":
    sys.exit(main())
