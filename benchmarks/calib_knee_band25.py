"""knee-band25 (session 25, POST HOC, decides nothing): how often a committed host platform misses a lockstep pair it
never saw, by the pair's knee ratio under that platform.

    python benchmarks/calib_knee_band25.py --json data/calibration-extra/knee-band25.json    # ~30 s
    python benchmarks/calib_knee_band25.py --with-call25 --json data/calibration-extra/knee-band26.json   # ~40 s
    python benchmarks/calib_knee_band25.py --session28 --json data/calibration-extra/knee-band28.json    # ~60 s

Every (platform, folder) below is out of sample: the platform saw none of the folder's points. H200: the recommended
wide platform (``h200-pcie-host-wide-3525cba-two-stage-gated2``) on every broad and knee grid measured on H200s since;
H100: card 1's wide platform (``h100-pcie-host``) on card 1's ``fresh16`` and card 2's ``fresh15`` / ``fresh``, and
``h100-pcie-host-pool24`` (cards 1 and 2) on card 3's ``fresh2`` / ``fresh3`` / ``fresh5``. For every lockstep
periodic pair of each folder: the knee ratio (V - R T_iss0(K, B)) / Q(K) under the platform
(``xstage.sim.heldout_misses.knee_ratio``) and whether a point of the pair is off by more than 15 % in T_iss. The table
counts pairs per GPU model and knee-ratio bin (``xstage.sim.knee_band.BINS``): ``pairs``, ``pairs_off`` (a point off
by > 15 %), ``share_off`` and the median over pairs of the pair's median |error|. ``xstage model`` reads this record
to say how far a prediction at a given knee ratio has held (``knee_ratio``, ``knee_band_*``).

``--with-call25`` (session 26): the same, with pool24 on the fourth H100's ``fresh11`` / ``fresh12`` / ``fresh13``
(call25, measured after knee-band25 was written and scored against it first, call25-scores.json) added to the H100
rows: the knee-band26 record.

``--session28`` (session 28): knee-band26's combinations, and ``h100-pcie-host-pool24`` on each of the 24 H100 host
folders measured after it (cards 5-13: call26, the session-27 repeats, call27, call27b, call27c, call28) with the
folder's median zero-gap drain rate (``folder_data(f, "median")``, call28's rule): R is what a card's own calibration
gives, so these rows say how far the rest of the law carries. The knee-band28 record, the one ``xstage model`` reads.
"""
import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee10 import refuse_existing, write_new  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim.fit import error_summary, model_check  # noqa: E402
from xstage.sim.heldout_misses import MISS_LIMIT, knee_ratio, periodic_pairs  # noqa: E402
from xstage.sim.knee_band import BINS, bin_label  # noqa: E402
from xstage.sim.platform import load_platform  # noqa: E402

EXTRA = Path(__file__).resolve().parents[1] / "data" / "calibration-extra"
H200_WIDE = "h200-pcie-host-wide-3525cba-two-stage-gated2"
COMBOS = {"H200": [(H200_WIDE, f"h200-pcie-host-{g}") for g in
                   ("fresh", "fresh2", "fresh3", "fresh5", "fresh10", "fresh11", "fresh12", "fresh14", "fresh15",
                    "fresh16")],
          "H100": [("h100-pcie-host", f) for f in ("h100-pcie-host-fresh16", "h100-pcie-host-fresh15",
                                                   "h100-pcie-host-fresh")]
          + [("h100-pcie-host-pool24", f) for f in ("h100-pcie-host-fresh2", "h100-pcie-host-fresh3",
                                                     "h100-pcie-host-fresh5")]}
CALL25 = [("h100-pcie-host-pool24", f"h100-pcie-host-fresh{g}") for g in (11, 12, 13)]
# knee-band28 (session 28): every H100 host folder measured after knee-band26 (cards 5-13, sessions 26-28), pool24
# with each folder's median zero-gap drain rate (call28's rule): a card's own R, which a user calibrating it has
LATER = [("h100-pcie-host-pool24", f"h100-pcie-host-{g}", "median") for g in
         ("fresh10", "fresh14", "fresh4", "fresh7")
         + tuple(f"fresh1{i}-{s}" for s in ("c27", "c27b", "call27") for i in (1, 2, 3))
         + ("fresh10-call27b", "fresh14-call27b")
         + tuple(f"fresh1{i}-{s}" for s in ("call27c", "c27d", "call28") for i in (1, 2, 3))]


def combos(with_call25: bool = False, later: bool = False) -> dict:
    """The (platform, folder[, rate]) combinations per GPU model: knee-band25's, with call25's folders added to the
    H100's (knee-band26), and with every later H100 folder scored at its own median R (knee-band28)."""
    return {gpu: c + (CALL25 if (with_call25 or later) and gpu == "H100" else [])
            + (LATER if later and gpu == "H100" else []) for gpu, c in COMBOS.items()}


def pairs_and_figures(platform, points) -> tuple[list[dict], dict]:
    """(knee ratio, off, median |error|, the signed error of its worst point) of every lockstep periodic pair of
    ``points`` (a calibration folder's frame) under ``platform`` (a ``Platform``), and issue 15's four figures on every
    lockstep point. A signed error is (predicted − measured) / measured: < 0, the pair waited longer than predicted;
    > 0, it ran freer."""
    check = model_check(points.reset_index(drop=True), platform)
    rows = [{"producers": k, "bytes_per_producer": b, "knee_ratio": knee_ratio(platform, k, b),
             "off": bool((np.abs(e) > MISS_LIMIT).any()), "median_abs_err": float(np.median(np.abs(e))),
             "worst_err": float(e[np.argmax(np.abs(e))])}
            for k, b, _, e in periodic_pairs(check, np.full(len(check), "all"), heldout_only=False)]
    errs = error_summary(check)
    keys = ("median_rel_err_T_iss", "p90_rel_err_T_iss", "median_rel_err_period", "p90_rel_err_period")
    return rows, {k: errs[k] for k in keys}


RATES = ("fit", "median")   # a folder's R: its platform.json's (least squares) or its zero-gap median (call28's rule)


def folder_rates(folder: str) -> tuple[object, float, dict | None]:
    """(points, the R its run fitted in GB/s, ``xstage.cli.calib_against.rate_check`` of that R against the median
    V / period of its zero-gap spin lockstep points) of committed calibration ``folder``, each file read once."""
    from xstage.cli.calib_against import rate_check
    points = load_records(EXTRA / folder / "points.parquet", "point")[0].reset_index(drop=True)
    fitted = load_platform(EXTRA / folder / "platform.json").drain_rate_GBps
    return points, fitted, rate_check(points, fitted, "host")


def folder_data(folder: str, rate: str = "fit") -> tuple[str, object, float]:
    """(name, lockstep-and-other points, R in GB/s) of committed calibration ``folder``. ``rate`` "fit": the R its run
    fitted (platform.json); "median": the median V / period of its zero-gap spin lockstep points (``folder_rates``;
    call28's rule, which one slow point cannot pull)."""
    if rate not in RATES:
        raise ValueError(f"rate {rate!r} is not one of {RATES}")
    points, fitted, check = folder_rates(folder)
    if rate == "fit":
        return folder, points, fitted
    if check is None:
        raise ValueError(f"{folder} has no zero-gap spin lockstep point: no median rate")
    return folder, points, check["median_zero_gap_rate_GBps"]


def pair_rows(platform_name: str, folder: str, rate: str | None = None) -> list[dict]:
    """``pairs_and_figures``' pair rows of committed ``folder`` under committed platform ``platform_name``, as
    committed, or with the folder's own R by ``rate`` (``folder_data``)."""
    from xstage.sim.carried import with_drain_rate
    platform = load_platform(EXTRA / platform_name / "platform.json")
    _, points, own_r = folder_data(folder, rate or "fit")
    return pairs_and_figures(platform if rate is None else with_drain_rate(platform, own_r), points)[0]


def table(rows: list[dict]) -> list[dict]:
    out = []
    for lo, hi in BINS:
        sel = [r for r in rows if r["knee_ratio"] is not None and lo < r["knee_ratio"] <= hi]
        if sel:
            n_off = sum(r["off"] for r in sel)
            out.append({"bin": bin_label(lo, hi), "lo": None if math.isinf(lo) else lo,   # None: unbounded
                        "hi": None if math.isinf(hi) else hi, "pairs": len(sel), "pairs_off": n_off,
                        "share_off": n_off / len(sel),
                        "median_abs_err": float(np.median([r["median_abs_err"] for r in sel]))})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="write the record here (refuses an existing file)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--with-call25", action="store_true",
                       help="add call25's three H100 folders (session 26; the knee-band26 record)")
    which.add_argument("--session28", action="store_true",
                       help="add call25's and every later H100 host folder (cards 5-13), pool24 at each folder's "
                       "median zero-gap R (session 28; the knee-band28 record, the one `xstage model` reads)")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_knee_band25")
    gpus = {}
    for gpu, chosen in combos(args.with_call25, args.session28).items():
        rows = [r for c in chosen for r in pair_rows(*c)]
        gpus[gpu] = {"combos": [list(c) for c in chosen], "n_pairs": len(rows), "bins": table(rows)}
        print(f"{gpu}: {len(rows)} lockstep pairs over {len(chosen)} folders")
        for b in gpus[gpu]["bins"]:
            print(f"  knee ratio {b['bin']:>12}: {b['pairs_off']:>3} of {b['pairs']:>3} pairs off by > 15 % "
                  f"({b['share_off']:.0%}), median |error| {b['median_abs_err']:.1%}")
    write_new(args.json, {"post_hoc": True, "miss_limit": MISS_LIMIT, "gpus": gpus, "provenance": provenance()},
              "calib_knee_band25")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
