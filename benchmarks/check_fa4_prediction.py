"""The pre-registered FA4 prediction against the FA4 measurement (fidelity issue, item 5), and two re-runs.

Reads the prediction record ``data/predictions/fa4-direct-h200-pcie-host.json`` (committed 2026-12-01 09:47
UTC, made from issue 16's FA-only rates before any fused FA4 variant was measured) and the FA4 kernel records
``data/attention-fa4/{run1,rep}/attention-fa4-kernel.parquet`` (measured from 09:59 UTC the same day). The
predicted layouts map to the measured variants as

    all_host  every tile host-mapped (the own chunk crosses PCIe too)     -> fused_allhost
    ulysses   the exact layout, own chunk in HBM, one launch               -> fused_vmm
              (and W launches, one per destination chunk)                 -> fused_perchunk

Per M and variant it prints the measured paired residual E_res (``paired_minus_fa(us)``, run1 and rep) beside
three predictions on ``h200-pcie-host``: ``prereg`` (the committed record, unchanged), ``meas_fa`` (the same
predictor with run1's MEASURED FA-only time in place of issue 16's rate) and ``sm_stage`` (``meas_fa`` with
``exit_waits_for_drain``: the SM-side stage, r_sm and Q_eff from the MoE tile logs, nothing from FA). Target:
|predicted - measured| <= max(20 us, 20 % of measured), judged against run1 (rep alongside). Hiding ratios
two ways: the predictor's H = 1 - E_res / (remote bytes / R) for prediction and measurement alike (``H_R``),
and the measurement's own H = 1 - E_res / (serial_fa4 - fa4)_paired (``H_ce``, the copy engine's time).

    python benchmarks/check_fa4_prediction.py [--out data/predictions/fa4-direct-check-h200-pcie-host.json]
"""

import argparse
import json
from pathlib import Path

import numpy as np

from xstage.errors import InputError, exit_with
from xstage.paths import data_dir
from xstage.provenance import provenance
from xstage.records import atomic_write_text, load_records
from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel, predict_fa

VARIANTS = {"fused_allhost": "all_host", "fused_vmm": "ulysses", "fused_perchunk": "ulysses"}
FRACTION = {"all_host": 1.0, "ulysses": None}
RUNS = ("run1", "rep")
TOLERANCE = {"rel": 0.20, "abs_us": 20.0}


def within(pred: float, meas: float) -> bool:
    return abs(pred - meas) <= max(TOLERANCE["abs_us"], TOLERANCE["rel"] * abs(meas))


def measured(folder: Path) -> dict:
    """{run: {M: {variant: row}}} of the FA4 kernel records."""
    out = {}
    for run in RUNS:
        frame, _ = load_records(folder / run / "attention-fa4-kernel.parquet", "kernel")
        out[run] = {int(M): g.drop_duplicates("variant", keep="last").set_index("variant")
                    for M, g in frame.groupby("M")}
    return out


def rows(prediction: Path, folder: Path, platform_name: str = "h200-pcie-host") -> list:
    pre = json.loads(prediction.read_text())
    prereg = {(r["M"], r["layout"]): r for r in pre["rows"]}
    meas = measured(folder)
    platform = load_platform(platform_name)
    out = []
    for M, g1 in sorted(meas["run1"].items()):
        if "fa4" not in g1.index:
            raise InputError("records", str(folder), f"have no fa4 row at M={M}")
        fa_us = float(g1.loc["fa4", "time(us)"])
        heads, d, W = int(g1.loc["fa4", "heads"]), int(g1.loc["fa4", "head_dim"]), int(g1.loc["fa4", "world_size"])
        for variant, layout in VARIANTS.items():
            if variant not in g1.index or (M, layout) not in prereg:
                continue
            kw = dict(seq_len=M, heads=heads, head_dim=d, world_size=W, fa_us=fa_us, remote_fraction=FRACTION[layout])
            preds = {"prereg": prereg[(M, layout)], "meas_fa": predict_fa(FaKernel(**kw), platform),
                     "sm_stage": predict_fa(FaKernel(**kw, exit_waits_for_drain=True), platform)}
            a2a = preds["meas_fa"]["a2a_us"]
            row = {"M": M, "layout": layout, "variant": variant, "fa_us_run1": fa_us,
                   "fa_us_prereg": preds["prereg"]["fa_us"], "a2a_us_at_R": a2a}
            for run in RUNS:
                g = meas[run][M]
                e = float(g.loc[variant, "paired_minus_fa(us)"])
                ce = float(g.loc["serial_fa4", "paired_minus_fa(us)"])
                row |= {f"measured_E_res_us_{run}": e, f"measured_H_R_{run}": 1 - e / a2a,
                        f"measured_H_ce_{run}": 1 - e / ce}
            for name, p in preds.items():
                e = float(p["E_res_us"])
                row |= {f"{name}_E_res_us": e, f"{name}_H_R": 1 - e / p["a2a_us"],
                        f"{name}_error_us": e - row["measured_E_res_us_run1"],
                        f"{name}_within": within(e, row["measured_E_res_us_run1"]),
                        f"{name}_within_rep": within(e, row["measured_E_res_us_rep"])}
            out.append(row)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prediction", default=None, help="prediction record (default: the data folder's "
                    "predictions/fa4-direct-h200-pcie-host.json)")
    ap.add_argument("--records", default=None, help="FA4 records folder (default: the data folder's attention-fa4/)")
    ap.add_argument("--out", default=None, help="write the comparison (.json)")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    pred = Path(args.prediction) if args.prediction else data_dir() / "predictions" / "fa4-direct-h200-pcie-host.json"
    table = rows(pred, Path(args.records) if args.records else data_dir() / "attention-fa4")
    print(f"{'M':>6} {'variant':>15} {'meas run1/rep':>14} {'prereg':>7} {'meas_fa':>8} {'sm_stage':>8}  within "
          f"p/m/s   H_R meas  pre  m_fa  sm   H_ce meas")
    yn = {True: "y", False: "n"}
    for r in table:
        print(f"{r['M']:>6} {r['variant']:>15} {r['measured_E_res_us_run1']:>7.0f}/{r['measured_E_res_us_rep']:<6.0f} "
              f"{r['prereg_E_res_us']:>7.0f} {r['meas_fa_E_res_us']:>8.0f} {r['sm_stage_E_res_us']:>8.0f}  "
              f"{yn[r['prereg_within']]}/{yn[r['meas_fa_within']]}/{yn[r['sm_stage_within']]}      "
              f"{r['measured_H_R_run1']:>5.2f} {r['prereg_H_R']:>4.2f} {r['meas_fa_H_R']:>5.2f} {r['sm_stage_H_R']:>4.2f}"
              f"   {r['measured_H_ce_run1']:>5.2f}")
    summary = {name: {"within_run1": int(np.sum([r[f"{name}_within"] for r in table])),
                      "within_rep": int(np.sum([r[f"{name}_within_rep"] for r in table])), "n": len(table),
                      "median_abs_error_us": float(np.median([abs(r[f"{name}_error_us"]) for r in table])),
                      "median_rel_error": float(np.median([abs(r[f"{name}_error_us"]) / r["measured_E_res_us_run1"]
                                                           for r in table]))}
               for name in ("prereg", "meas_fa", "sm_stage")}
    for name, s in summary.items():
        print(f"{name:>9}: within 20 % or 20 us {s['within_run1']}/{s['n']} (rep {s['within_rep']}/{s['n']}), "
              f"median |error| {s['median_abs_error_us']:.0f} us = {s['median_rel_error']:.0%}")
    if args.out:
        record = {"what": "pre-registered FA4 prediction (made before measuring) against the FA4 measurement, "
                          "plus the predictor re-run on run1's measured FA-only times with and without the SM stage",
                  "prediction_record": str(pred.name), "prediction_date": json.loads(pred.read_text())["provenance"]["date"],
                  "tolerance": TOLERANCE, "summary": summary, "rows": table, "provenance": provenance()}
        atomic_write_text(args.out, json.dumps(record, indent=1, default=str), overwrite=args.overwrite)
    return 0


if __name__ == "__main__":
    exit_with(main, "check_fa4_prediction")
