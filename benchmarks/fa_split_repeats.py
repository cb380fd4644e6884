"""Run-to-run variation of the Triton FA-A2A residuals where the committed records repeat a configuration.

The same kernel build (bm 128, bn 128, 8 warps, 3 stages, TMA, the ``.wt`` sends) was timed at the same (M, heads,
head dim) by several committed runs (``RUNS``; back-to-back timing, paired residual over FA-only). Per
configuration measured by at least two runs, and per variant: the median, min, max and range (max - min) of the
paired residual over the runs (``sim.predict_drift.repeat_spread``), beside the target's tolerance at the median
(max(20 us, 20 %)); a range above twice the tolerance means no single answer is within target of every repeat.
The clock diagnostics' idle-gap residuals (another protocol: each launch after 150 ms idle) are listed apart.
Runs with a ``rep`` column (repeats inside one run) count each repeat as a run.

    python benchmarks/fa_split_repeats.py [--out data/predictions/fa-split-repeats-h200-pcie-host.json]
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import predict_pers_fa4 as PP  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.paths import data_dir  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import atomic_write_text, load_records  # noqa: E402
from xstage.sim.predict_drift import repeat_spread  # noqa: E402

RUNS = ("attention", "attention-fa4/triton", "attention-runs/49d9e81", "attention-runs/7531682-heldout",
        "attention-runs/6c1c349-heldout2", "attention-runs/63fb3ec-heldout3", "attention-runs/ad8f0af-heldout4")
CLOCK = ("attention-runs/6c1c349-heldout2/clock/clock-diag.json", "attention-runs/6c1c349-heldout2/clock2/clock-diag.json")
VARIANTS = ("fused_wb", "fused_wb_split", "fused_wb_stagger", "fused_wb_split_stagger", "fused_hbm")
ALIAS = {"fused_wt_split_stagger": "fused_wb_split_stagger"}


def measurements(base: Path, runs=RUNS) -> dict:
    """{(M, heads, head_dim): {variant: [(run, residual_us), ...]}} of the build above (bn 128, 3 stages)."""
    out = {}
    for name in runs:
        frame = load_records(base / name / "attention-kernel.parquet", "kernel")[0]
        frame = frame.assign(rep=frame["rep"] if "rep" in frame.columns else 0)
        frame = frame[(frame["block_n"] == 128) & (frame["num_stages"] == 3) & frame["config"].str.contains(",tma")]
        for (rep, M, h, d), g in frame.groupby(["rep", "M", "heads", "head_dim"]):
            g = g.drop_duplicates("variant", keep="last").set_index("variant")
            for v in g.index:
                if ALIAS.get(v, v) in VARIANTS and g.loc[v, "paired_minus_fa(us)"] == g.loc[v, "paired_minus_fa(us)"]:
                    key = (int(M), int(h), int(d))
                    out.setdefault(key, {}).setdefault(ALIAS.get(v, v), []).append(
                        (f"{name}#rep{int(rep)}", float(g.loc[v, "paired_minus_fa(us)"])))
    return out


def spreads(meas: dict) -> list:
    rows = []
    for (M, h, d), per in sorted(meas.items()):
        for v, vals in sorted(per.items()):
            if len(vals) < 2:
                continue
            s = repeat_spread([x for _, x in vals])
            tol = max(PP.TOLERANCE["abs_us"], PP.TOLERANCE["rel"] * abs(s["median"]))
            rows.append({"M": M, "heads": h, "head_dim": d, "kv_head_MiB": 2 * M * d * 2 / 2**20, "variant": v, **s,
                         "tolerance_at_median_us": tol, "range_over_tolerance": s["range"] / tol,
                         "runs": [r for r, _ in vals], "values_us": [x for _, x in vals]})
    return rows


def idle_gap(base: Path) -> list:
    out = []
    for p in CLOCK:
        for r in json.loads((base / p).read_text()).get("runs", []):
            for v, pairs in r.get("gapped", {}).items():
                diffs = [float(x["diff_us"]) for x in pairs]
                out.append({"M": int(r["M"]), "variant": v, "record": p, "pairs_diff_us": diffs,
                            **{f"pairs_{k}": x for k, x in repeat_spread(diffs).items()}})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=",".join(RUNS), help="comma-separated Triton runs under data/")
    ap.add_argument("--out", default=None, help="write the record (.json); never over an existing file")
    args = ap.parse_args(argv)
    if args.out and Path(args.out).exists():
        raise InputError("--out", args.out, "already exists (records are never overwritten)")
    base = data_dir()
    runs = tuple(x.strip() for x in args.runs.split(",") if x.strip())
    for n in runs:
        if not (base / n / "attention-kernel.parquet").is_file():
            raise InputError("--runs", n, "has no attention-kernel.parquet")
    rows = spreads(measurements(base, runs))
    for r in rows:
        print(f"M {r['M']:>6} H{r['heads']} d{r['head_dim']:<3} {r['kv_head_MiB']:5.1f} MiB {r['variant']:>23}: "
              f"median {r['median']:6.0f}  range {r['range']:5.0f} ({r['min']:.0f}..{r['max']:.0f}, n {r['n']})  "
              f"tolerance {r['tolerance_at_median_us']:4.0f}  range/tol {r['range_over_tolerance']:.2f}")
    gaps = idle_gap(base) if runs == RUNS else []
    if args.out:
        atomic_write_text(args.out, json.dumps({
            "what": "run-to-run spread of the Triton FA-A2A paired residuals where committed runs repeat a "
                    "configuration (bm 128, bn 128, 3 stages, TMA)", "runs": list(runs), "tolerance": PP.TOLERANCE,
            "rows": rows, "idle_gap_residuals": gaps, "provenance": provenance()}, indent=1, default=str))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_split_repeats.py")
