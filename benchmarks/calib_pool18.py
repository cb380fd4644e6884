"""pool18 (session 18, POST HOC on committed knee grids): ``two-stage-lockq`` under ``bracket`` with ``--pool`` of
knee10's five committed broad host grids, scored by the rule in data/calibration-extra/pool18-criterion.md (written
before any fit); the same refits without the pool are scored beside as the baseline.

    python benchmarks/calib_pool18.py --json OUT     # 6 folders x 5 seeds x 2 = 60 refits; ~10 min

Each fit is the product's refit (``calib_fresh11.one``) of a folder's points at ``bracket`` 0.3 seed s; a grid
measured twice in separate runs is fitted on the point-wise median of its runs (``calib_b0wide.folder_of``).
"""
import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_b0wide import EXTRA, MODEL  # noqa: E402
from calib_b0wide import folder_of as b0wide_folder_of  # noqa: E402
from calib_fresh11 import FIGS, SEEDS, SEEDS_NEEDED, one  # noqa: E402
from calib_knee10 import refuse_existing, write_new  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

POOL = tuple(EXTRA / f"h200-pcie-host-{g}" for g in ("wide", "wide-3525cba", "fresh", "fresh2", "fresh3"))
FOLDERS = {"fresh14": ("fresh14",), "fresh13-r3": ("fresh13-r3",), "fresh13": ("fresh13-r1", "fresh13-r2"),
           "fresh12": ("fresh12", "fresh12-r2"), "fresh11": ("fresh11", "fresh11-r2"), "fresh10": ("fresh10",)}
CANDIDATES = {"lockq": (), "pool18": POOL}


def folder_of(name: str, tmp: Path) -> Path:
    """The folder fitted: the one run (or ``--repeat`` median) named, or the point-wise median of separate runs."""
    return b0wide_folder_of(name, tmp, FOLDERS)


def decide(rows) -> dict:
    met = {(g, c): sum(r["all_four"] for r in rows if (r["grid"], r["candidate"]) == (g, c))
           for g in FOLDERS for c in CANDIDATES}
    return {"rule": "data/calibration-extra/pool18-criterion.md",
            "seeds_met": {f"{g} {c}": n for (g, c), n in met.items()},
            "ready": all(met[(g, "pool18")] >= SEEDS_NEEDED for g in FOLDERS)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--only", choices=sorted(FOLDERS), action="append", help="score these folders only (no decision)")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_pool18")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for grid in args.only or FOLDERS:
            folder = folder_of(grid, Path(d))
            for name, pool in CANDIDATES.items():
                for seed in SEEDS:
                    r = one("host", MODEL, "bracket", seed, records=folder, pool=pool)
                    rows.append({"grid": grid, "candidate": name, **{k: r[k] for k in r if k != "target"}})
                    print(f"{grid:10s} {name:6s} seed {seed} T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
                          f"{r['heldout_p90_rel_err_T_iss']:.1%} period {r['heldout_median_rel_err_period']:.1%} "
                          f"/ {r['heldout_p90_rel_err_period']:.1%} {'met' if r['all_four'] else 'not met'} "
                          f"misses {r['misses']}", flush=True)
    decision = decide(rows) if not args.only else {"partial": args.only}
    print(decision)
    write_new(args.json, {"post_hoc": True, "figures": list(FIGS), "pool": [str(p.relative_to(EXTRA.parents[1]))
                                                                             for p in POOL],
                          "decision": decision, "rows": rows, "provenance": provenance()}, "calib_pool18")
    return 0


if __name__ == "__main__":
    sys.exit(main())
