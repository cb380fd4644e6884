"""The MoE replays on the held-out sweep, per configuration (issue 15's MoE target on unseen cases).

``hw/moe/bench.py --sweep heldout`` measured configurations the main sweep never did (setting L bf16, setting
M W8A8). This replays each of them with the bundled one-stage replay and with the adopted two-stage law
(``compare.moe_two_stage.adopted_law``: its record predates the run, nothing is refitted) and prints, per
configuration, the measured and replayed speedups (expert-wave / interleaved), which schedule wins and
whether each replay names it, and the GEMM's ratio to the faster library; the record keeps the same rows.

    python benchmarks/moe_heldout_table.py --records data/moe/run-42093a6-heldout \\
        [--out data/predictions/moe-42093a6-heldout.json] [--overwrite]
"""

import argparse
import json
from pathlib import Path

import numpy as np

from moe_law_heldout import speedups
from xstage.compare.moe_library import library_ratios, load_library_runs
from xstage.compare.moe_records import load_kernel_records, per_config
from xstage.compare.moe_two_stage import adopted_law, speedup_errors
from xstage.errors import InputError, exit_with
from xstage.paths import data_dir
from xstage.provenance import provenance
from xstage.records import atomic_write_text, load_records
from xstage.sim.platform import load_platform


def winner(s: float, identical: bool) -> str:
    return "same" if identical else ("interleaved" if s > 1 else "expert_wave")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", required=True, help="the held-out run's folder (moe-kernel.parquet)")
    ap.add_argument("--out", default=None, help="record path (default: predictions/moe-<run without run->.json)")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    records = Path(args.records)
    if not (records / "moe-kernel.parquet").is_file():
        raise InputError("--records", str(records), "holds no moe-kernel.parquet")
    d = data_dir()
    out = Path(args.out) if args.out else d / "predictions" / f"moe-{records.name.removeprefix('run-')}.json"
    if out.exists() and not args.overwrite:
        raise InputError("--out", str(out), "already exists (pass --overwrite to replace it)")
    law = adopted_law(d)
    if law is None:
        raise InputError("adopted law", str(d / "predictions"), "holds no adopted moe-law-heldout-*.json")
    kernel = load_kernel_records(records)
    platform = load_platform(law.platform or "h200-pcie-host")
    frame = speedups(kernel, platform, {"two_stage": law}).set_index("config")
    lib = library_ratios(per_config(kernel), load_library_runs(records))
    rows = []
    for config, r in frame.iterrows():
        m, ident = float(r["measured"]), bool(r["identical"])
        rows.append({"config": config, "measured": m, "one_stage": float(r["one_stage"]),
                     "two_stage": float(r["two_stage"]), "identical": ident, "winner": winner(m, ident),
                     "one_stage_names_it": ident or winner(float(r["one_stage"]), False) == winner(m, False),
                     "two_stage_names_it": ident or winner(float(r["two_stage"]), False) == winner(m, False),
                     "timing_spread": float(r["timing_spread"]),
                     "gemm_vs_library": float(lib["gemm_vs_library"].get(config, np.nan))})
    summary = {name: speedup_errors(frame["measured"], frame[name], frame["identical"], frame["timing_spread"])
               for name in ("one_stage", "two_stage")}
    print(f"{'config':44s} {'measured':>8s} {'1-stage':>8s} {'2-stage':>8s}  winner       named(1/2)  vs library")
    for r in rows:
        print(f"{r['config']:44s} {r['measured']:8.3f} {r['one_stage']:8.3f} {r['two_stage']:8.3f}  "
              f"{r['winner']:12s} {'y' if r['one_stage_names_it'] else 'n'}/{'y' if r['two_stage_names_it'] else 'n'}"
              f"        {r['gemm_vs_library']:.3f}")
    for name, e in summary.items():
        print(f"{name}: speedup error median {e['median_pp']:.2f} / p90 {e['p90_pp']:.2f} pp; winner named in "
              f"{e['n_names_winner']} of {e['n_distinct']} whose orders differ")
    rec = {"records": records.name, "law": {"source": law.source, "r_sm_GBps": law.r_sm_GBps,
                                            "Q_eff_MiB": law.q_eff_MiB, "per_sm": law.per_sm,
                                            "epilogue_fixed": law.epilogue_fixed, "cover_us": law.cover_us},
           "platform": platform.name, "run_provenance": load_records(records / "moe-kernel.parquet", "kernel")[1]
           .get("provenance", {}),
           "summary": summary, "rows": rows, "provenance": provenance()}
    atomic_write_text(out, json.dumps(rec, indent=1, default=float), overwrite=args.overwrite)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    exit_with(main, "moe_heldout_table")
