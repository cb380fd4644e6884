"""combo18 (session 18, POST HOC on committed knee grids): issue18's broad issue law held fixed (``calib_issue18``)
with perk18's per-K capacity (``calib_perk18._fit_both``) on each ``bracket`` fit half, judged on its held-out
half; scored by the rule in data/calibration-extra/combo18-criterion.md (written before any fit). Beside it,
judging nothing: the same fit without the per-K step (``issue-law``: lockq with the broad issue law, fitted the
study's way).

    python benchmarks/calib_combo18.py --json OUT     # 1 broad fit + 6 folders x 5 seeds lockq fits; ~4 min
    python benchmarks/calib_combo18.py --records DIR --json OUT   # the pre-registered score of one fresh folder

``--records DIR``: the fresh test frozen in data/calibration-extra/fresh15-preregistration.md -- combo18 on one
calibration folder (a ``--repeat 2`` median), ``bracket`` seeds 0-4, met iff all four checks at >= 4 of 5 seeds.
``--preregistration FILE`` names the pre-registration the record cites (default fresh15's; fresh16's, session 21,
freezes the same score on a second grid); it changes nothing else.
"""
import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import FIGS, FRACTION, SEEDS, SEEDS_NEEDED  # noqa: E402
from calib_issue18 import LAW_KEYS, broad_issue_law, stands  # noqa: E402
from calib_knee10 import refuse_existing, write_new  # noqa: E402
from calib_perk18 import _fit_both, _row  # noqa: E402
from calib_pool18 import EXTRA, FOLDERS, folder_of  # noqa: E402,F401  (EXTRA: the tests read the record)
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim.split_sweeps import split_by_rule  # noqa: E402

CANDIDATES = {"combo18": 1, "issue-law": 0}     # the index of _fit_both's (lockq, per-K) platform each judges


def scan(folders=tuple(FOLDERS), log=print, records=None) -> list:
    """combo18 and the issue law alone on each knee folder (or on the one folder ``records``, named by its path)."""
    law, rows = broad_issue_law(), []
    with tempfile.TemporaryDirectory() as d:
        for grid in ([str(records)] if records is not None else folders):
            where = Path(grid) if records is not None else folder_of(grid, Path(d))
            points, _ = load_records(where / "points.parquet", "point")
            points = points.reset_index(drop=True)
            for seed in SEEDS:
                split = split_by_rule(points, "bracket", FRACTION, seed)
                with stands(law):
                    fitted = _fit_both(points[split.to_numpy() == "fit"], points, grid)
                for cand, i in CANDIDATES.items():
                    r = _row("heldout", grid, seed, cand, fitted[i], points, split)
                    rows.append(r)
                    log(f"{grid:10s} {cand:9s} seed {seed} T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
                        f"{r['heldout_p90_rel_err_T_iss']:.1%} {'met' if r['all_four'] else 'not met'} "
                        f"misses {r['misses']}", flush=True)
    return rows


def decide(rows) -> dict:
    met = {g: sum(r["all_four"] for r in rows if (r["grid"], r["candidate"]) == (g, "combo18")) for g in FOLDERS}
    return {"rule": "data/calibration-extra/combo18-criterion.md", "seeds_met": met,
            "ready": all(n >= SEEDS_NEEDED for n in met.values()),
            "beside_issue_law": {g: sum(r["all_four"] for r in rows if (r["grid"], r["candidate"]) == (g, "issue-law"))
                                 for g in FOLDERS}}


FRESH_RULE = "data/calibration-extra/fresh15-preregistration.md"


def score_fresh(rows, rule: str = FRESH_RULE) -> dict:
    """The fresh test's verdict (fresh15-preregistration.md): combo18 met iff all four checks at >= 4 of 5 seeds."""
    met = sum(r["all_four"] for r in rows if r["candidate"] == "combo18")
    return {"rule": rule, "seeds_met": met,
            "verdict": "met" if met >= SEEDS_NEEDED else "not met",
            "beside_issue_law": sum(r["all_four"] for r in rows if r["candidate"] == "issue-law")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--records", type=Path, help="score this one calibration folder (the fresh test)")
    ap.add_argument("--preregistration", default=FRESH_RULE, help="the pre-registration the record cites")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_combo18")
    if args.records is not None:
        if not (args.records / "points.parquet").is_file():
            print(f"calib_combo18: error: --records {args.records} holds no points.parquet", file=sys.stderr)
            raise SystemExit(2)
        rows = scan(records=args.records)
        decision = score_fresh(rows, args.preregistration)
        print(decision)
        write_new(args.json, {"pre_registered": True, "records": str(args.records), "decision": decision,
                              "rows": rows, "provenance": provenance()}, "calib_combo18")
        return 0
    rows = scan()
    decision = decide(rows)
    print(decision)
    terms = {k: broad_issue_law()["fit_two_stage"].get(k) for k in LAW_KEYS}
    write_new(args.json, {"post_hoc": True, "figures": list(FIGS), "issue_law": terms, "decision": decision,
                          "rows": rows, "provenance": provenance()}, "calib_combo18")
    return 0


if __name__ == "__main__":
    sys.exit(main())
