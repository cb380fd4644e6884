"""lawscan18 (session 18, POST HOC, decides nothing): can any platform law in the product represent the knee grids?
Each knee folder fitted by each law on **every** one of its points (``calib_issue18.insample``'s upper bound, the
law's own issue law), judged on each ``bracket`` seed's held-out half. A law that misses a folder here cannot pass
that folder from any fit half; one that passes every folder here is only a candidate, to be scored out of sample by a
rule written first.

    python benchmarks/calib_lawscan18.py --json OUT     # 15 laws x 6 folders = 90 fits; ~10 min
"""
import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import FIGS, FRACTION, SEEDS, SEEDS_NEEDED, all_four  # noqa: E402
from calib_knee10 import fit_model, refuse_existing, write_new  # noqa: E402
from calib_knee14 import judge  # noqa: E402
from calib_pool18 import EXTRA, FOLDERS, folder_of  # noqa: E402,F401  (EXTRA: the tests read the record)
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim.platform_fit import MODEL_STANDING  # noqa: E402
from xstage.sim.split_sweeps import split_by_rule  # noqa: E402

LAWS = tuple(MODEL_STANDING)


def scan(laws=LAWS, folders=tuple(FOLDERS), log=print) -> list:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for grid in folders:
            points, _ = load_records(folder_of(grid, Path(d)) / "points.parquet", "point")
            points = points.reset_index(drop=True)
            for law in laws:
                try:
                    plat, _ = fit_model(points.drop(columns=["split"], errors="ignore"), law, f"lawscan-{grid}")
                except Exception as exc:   # a law that cannot fit this grid at all: recorded, not hidden
                    rows.append({"grid": grid, "law": law, "error": f"{type(exc).__name__}: {exc}"})
                    log(f"{grid:10s} {law:24s} fit failed: {exc}", flush=True)
                    continue
                for seed in SEEDS:
                    j = judge(plat, points, split_by_rule(points, "bracket", FRACTION, seed))
                    r = {"grid": grid, "law": law, "seed": seed, **{f"heldout_{k}": j[f"heldout_{k}"] for k in FIGS},
                         "misses": j["misses"]}
                    r["all_four"] = all_four(r)
                    rows.append(r)
                met = sum(r["all_four"] for r in rows if r.get("law") == law and r["grid"] == grid and "seed" in r)
                p90 = [r["heldout_p90_rel_err_T_iss"] for r in rows if r.get("law") == law and r["grid"] == grid
                       and "seed" in r]
                log(f"{grid:10s} {law:24s} in-sample seeds met {met}/5, T_iss p90 {min(p90):.1%}-{max(p90):.1%}",
                    flush=True)
    return rows


def summary(rows) -> dict:
    out = {}
    for law in dict.fromkeys(r["law"] for r in rows):
        per = {g: sum(r.get("all_four", False) for r in rows if (r["law"], r["grid"]) == (law, g)) for g in FOLDERS}
        out[law] = {"seeds_met": per, "every_folder": all(n >= SEEDS_NEEDED for n in per.values())}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_lawscan18")
    rows = scan()
    s = summary(rows)
    for law, v in s.items():
        print(f"{law:24s} {v['seeds_met']} {'every folder' if v['every_folder'] else ''}")
    write_new(args.json, {"post_hoc": True, "note": "every law fitted on every point of each knee folder; decides "
                          "nothing", "summary": s, "rows": rows, "provenance": provenance()}, "calib_lawscan18")
    return 0


if __name__ == "__main__":
    sys.exit(main())
