"""b0wide (session 17, POST HOC after the fresh14 score): ``two-stage-lockq`` with the issue law's store-buffer
search widened from 0-32 KiB to 0-64 KiB (``platform_fit.BUFFERS``, set for these fits only; the product is not
changed), scored by the rule in data/calibration-extra/b0wide-criterion.md (written before any fit).

    python benchmarks/calib_b0wide.py --json OUT     # 5 grids x 5 seeds x 2 buffer grids = 50 refits; ~5 min

Each fit is the product's refit (``calib_fresh11.one``) of a folder's points at ``bracket`` 0.3 seed s; a grid
measured twice is fitted on the point-wise median of its two runs (``--median-with``). Rows for the product's grid
(0-32 KiB) are scored beside, as the baseline.
"""
import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import FIGS, SEEDS, SEEDS_NEEDED, one  # noqa: E402
from calib_knee10 import refuse_existing, write_new  # noqa: E402
from xstage.hw.calib.calibrate import refit  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim import platform_fit  # noqa: E402

EXTRA = Path(__file__).resolve().parents[1] / "data" / "calibration-extra"
MODEL = "two-stage-lockq"
WIDE = tuple(1024 * k for k in range(0, 65))
GRIDS = {"fresh14": ("fresh14",), "fresh13": ("fresh13-r1", "fresh13-r2"), "fresh12": ("fresh12", "fresh12-r2"),
         "fresh11": ("fresh11", "fresh11-r2"), "fresh10": ("fresh10",)}
DECIDING, GUARDS = "fresh14", ("fresh13", "fresh12", "fresh11", "fresh10")


@contextlib.contextmanager
def buffers(grid):
    saved = platform_fit.BUFFERS
    platform_fit.BUFFERS = grid
    try:
        yield
    finally:
        platform_fit.BUFFERS = saved


def folder_of(grid: str, tmp: Path, grids=GRIDS) -> Path:
    """The folder fitted: the grid's one run (or ``--repeat`` median), or the point-wise median of its runs made apart
    (written once into ``tmp``, no split); ``grids``: name -> the run folders' suffixes."""
    runs = [EXTRA / f"h200-pcie-host-{r}" for r in grids[grid]]
    if len(runs) == 1:
        return runs[0]
    out = tmp / f"{grid}-median"
    if not out.exists():
        refit(out, records=runs[0], median_with=runs[1:])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_b0wide")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for grid in GRIDS:
            folder = folder_of(grid, Path(d))
            for name, grid_b in (("lockq", platform_fit.BUFFERS), ("b0wide", WIDE)):
                with buffers(grid_b):
                    for seed in SEEDS:
                        r = one("host", MODEL, "bracket", seed, records=folder)
                        rows.append({"grid": grid, "candidate": name, **{k: r[k] for k in r if k != "target"}})
                        print(f"{grid:8s} {name:7s} seed {seed} T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
                              f"{r['heldout_p90_rel_err_T_iss']:.1%} period {r['heldout_median_rel_err_period']:.1%} "
                              f"/ {r['heldout_p90_rel_err_period']:.1%} {'met' if r['all_four'] else 'not met'} "
                              f"misses {r['misses']}", flush=True)
    met = {(g, c): sum(r["all_four"] for r in rows if (r["grid"], r["candidate"]) == (g, c))
           for g in GRIDS for c in ("lockq", "b0wide")}
    ready = all(met[(g, "b0wide")] >= SEEDS_NEEDED for g in (DECIDING,) + GUARDS)
    decision = {"rule": "data/calibration-extra/b0wide-criterion.md", "seeds_met": {f"{g} {c}": n for (g, c), n in
                                                                                   met.items()},
                "ready": ready}
    print(decision)
    write_new(args.json, {"post_hoc": True, "figures": list(FIGS), "decision": decision, "rows": rows,
                          "provenance": provenance()}, "calib_b0wide")
    return 0


if __name__ == "__main__":
    sys.exit(main())
