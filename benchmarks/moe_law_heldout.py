"""MoE laws judged on a run that fitted nothing, then refitted on half of it (issues 15 and 17).

Part 1: the bundled one-stage replay (``compare.moe_records.resimulate``, what ``xstage results moe`` reports)
and the two-stage law of ``--law-record`` (fitted on ``data/moe/run-d815b94``: r_sm, Q_eff) replay every
configuration of ``--records`` (default ``data/moe/run-7c8dfb2-quack``: early_rows + prefetch, BLOCK_N 256 at
long K, 16 rows side by side and two programs per SM at short K); none of it was fitted there. The law is
applied with the programs of one SM sharing its r_sm (``per_sm``, the law's reading) and, as a variant, with
r_sm per program. Per configuration: measured and replayed speedups (expert-wave / interleaved).

Part 2: the law refitted on a seeded split of ``--records``' shape groups (``moe_sm_stage_heldout.split``:
whole groups, both routings on one side): a grid over r_sm, Q_eff, per-SM sharing and whether the remote
epilogue keeps the measured local-store L2 span as a fixed part (the new kernel's 64 KiB L2 tiles spend
~2 us there against ~0.8 us in the old run); the point with the least mean |pp| on the fit half (ties: more
winners named, then the lower median); then, at that point, a prefetch window (``cover_us``: the next mainloop
may run that long before the SM's bytes left, the reading that loading the next tile early takes away part of
the stall) chosen by the same rule on the fit half; judged on the held-out half and on ``--old-records``.
Misses are listed with the measured margin |speedup - 1| beside the run's timing spread (the larger of the two
schedules' interquartile range / median).

``adopted``: the candidate (recorded or refitted law) with the lower median pp on the held-out half, kept
only if it beats the one-stage replay there in median pp and names at least as many winners; ``xstage
results moe`` then reports it beside today's keys. pp = |replayed - measured speedup| x 100; winners are
counted over configurations whose two orders differ.

    python benchmarks/moe_law_heldout.py [--records data/moe/run-7c8dfb2-quack] [--seed 0]
        [--out data/predictions/moe-law-heldout-7c8dfb2.json] [--overwrite]
"""

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd

from moe_sm_stage_heldout import shape_of, split
from xstage.compare.moe_records import load_kernel_records, per_config, resimulate
from xstage.compare.moe_two_stage import TwoStageLaw, resimulate_law, speedup_errors
from xstage.errors import InputError, exit_with
from xstage.paths import data_dir
from xstage.provenance import provenance
from xstage.records import atomic_write_text
from xstage.sim.platform import load_platform

GRID_R_SM = (0.4, 0.5, 0.6, 0.7, 0.8, 1.0)   # GB/s per SM (per program without per_sm)
GRID_Q = (0.05, 0.2, 0.78)                  # MiB
GRID_PER_SM = (True, False)
GRID_EPI = (False, True)
GRID_COVER = (0.0, 2.0, 5.0, 10.0, 20.0)     # us


def speedups(kernel: pd.DataFrame, platform, laws: dict) -> pd.DataFrame:
    """Per configuration: measured speedup, identical orders, the one-stage replay and each law's replay."""
    k = resimulate(kernel, platform, f"bundled {platform.name}")
    for name, law in laws.items():
        k = resimulate_law(k, platform, law, prefix=f"sim_{name}")
    c = per_config(k).set_index("config")
    inter = k[k["variant"] == "interleaved"].drop_duplicates("config", keep="last").set_index("config")
    out = pd.DataFrame({"measured": c["speedup_interleaved"], "identical": c["schedules_identical"],
                        "one_stage": c["sim_speedup"]})
    for name in laws:
        out[name] = inter[f"sim_{name}_wave(us)"] / inter[f"sim_{name}_int(us)"]
    out["group_rows"] = inter["group_rows"] if "group_rows" in inter else 1
    out["num_sms"] = inter["num_sms"]
    sched = k[k["variant"].isin(["expert_wave", "interleaved"])]
    iqr = (sched["time_p75(us)"] - sched["time_p25(us)"]) / sched["time(us)"]
    out["timing_spread"] = iqr.groupby(sched["config"]).max()
    return out.reset_index()


def misses(frame: pd.DataFrame, name: str) -> list:
    """Configurations whose orders differ and whose winner ``name`` gets wrong, with the measured margin."""
    d = frame[~frame["identical"] & (np.sign(frame[name] - 1) != np.sign(frame["measured"] - 1))]
    return [{"config": str(r["config"]), "measured": float(r["measured"]), "replayed": float(r[name]),
             "margin": float(abs(r["measured"] - 1)), "timing_spread": float(r["timing_spread"])}
            for _, r in d.iterrows()]


def fit_point(fit_k: pd.DataFrame, platform, law: TwoStageLaw) -> dict:
    """The law's errors on the fit half (mean |pp| is what the grid minimises)."""
    k = resimulate_law(fit_k, platform, law, prefix="sim_g")
    c = per_config(k).set_index("config")
    inter = k[k["variant"] == "interleaved"].drop_duplicates("config", keep="last").set_index("config")
    rep = (inter["sim_g_wave(us)"] / inter["sim_g_int(us)"]).reindex(c.index)
    e = speedup_errors(c["speedup_interleaved"], rep, c["schedules_identical"])
    return {"fit_mean_pp": float(np.mean(np.abs(rep - c["speedup_interleaved"]) * 100)),
            **{f"fit_{a}": b for a, b in e.items()}}


def best_of(grid: list) -> dict:
    return min(grid, key=lambda g: (round(g["fit_mean_pp"], 6), -g["fit_n_names_winner"], g["fit_median_pp"]))


def summary(frame: pd.DataFrame, names) -> dict:
    return {n: speedup_errors(frame["measured"], frame[n], frame["identical"]) for n in names}


def line(e: dict) -> str:
    return f"{e['median_pp']:.2f} / {e['p90_pp']:.2f} pp, {e['n_names_winner']} of {e['n_distinct']}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default=None, help="held-out run (default: moe/run-7c8dfb2-quack)")
    ap.add_argument("--old-records", default=None, help="second check (default: moe/run-d815b94)")
    ap.add_argument("--law-record", default=None, help="default: predictions/moe-stage-grid-heldout.json")
    ap.add_argument("--platform", default="h200-pcie-host")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="default: predictions/moe-law-heldout-7c8dfb2.json")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    d = data_dir()
    records = Path(args.records) if args.records else d / "moe" / "run-7c8dfb2-quack"
    old = Path(args.old_records) if args.old_records else d / "moe" / "run-d815b94"
    law_path = Path(args.law_record) if args.law_record else d / "predictions" / "moe-stage-grid-heldout.json"
    out = Path(args.out) if args.out else d / "predictions" / "moe-law-heldout-7c8dfb2.json"
    for flag, folder in (("--records", records), ("--old-records", old)):
        if not folder.is_dir():
            raise InputError(flag, str(folder), "is not a folder")
    if out.exists() and not args.overwrite:
        raise InputError("--out", str(out), "already exists (pass --overwrite to replace it)")
    try:
        fitted = json.loads(law_path.read_text())["fitted"]
        recorded = TwoStageLaw(float(fitted["r_sm_GBps"]), float(fitted["Q_eff_MiB"]), source=str(law_path.name))
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError("--law-record", str(law_path), "has no readable fitted r_sm_GBps / Q_eff_MiB") from None
    platform = load_platform(args.platform)
    kernel, kernel_old = load_kernel_records(records), load_kernel_records(old)
    pd.set_option("display.width", 200)

    # --- part 1: the existing laws, nothing fitted on this run ------------------------------------
    per_prog = TwoStageLaw(recorded.r_sm_GBps, recorded.q_eff_MiB, per_sm=False)
    f1 = speedups(kernel, platform, {"two_stage": recorded, "two_stage_per_program": per_prog})
    names1 = ["one_stage", "two_stage", "two_stage_per_program"]
    part1 = summary(f1, names1)
    print(f"Part 1: {records.name}, fully held out (law: r_sm {recorded.r_sm_GBps} GB/s, Q_eff {recorded.q_eff_MiB} MiB "
          f"from {law_path.name})")
    print(f1.assign(config=f1["config"].str.replace("-s0", "")).round(3).to_string(index=False))
    for n in names1:
        print(f"  {n:24s} {line(part1[n])}")

    # --- part 2: refit on a recorded split of this run, judged on the other half and on the old run ---
    fit_groups, held_groups = split(kernel["config"].unique(), args.seed)
    fit_k = kernel[kernel["config"].map(shape_of).isin(fit_groups)]
    grid = [{"r_sm_GBps": r_sm, "Q_eff_MiB": q, "per_sm": per_sm, "epilogue_fixed": epi, "cover_us": 0.0,
             **fit_point(fit_k, platform, TwoStageLaw(r_sm, q, per_sm, epi))}
            for r_sm, q, per_sm, epi in itertools.product(GRID_R_SM, GRID_Q, GRID_PER_SM, GRID_EPI)]
    b = best_of(grid)
    cover_grid = [{**{k: b[k] for k in ("r_sm_GBps", "Q_eff_MiB", "per_sm", "epilogue_fixed")}, "cover_us": cv,
                   **fit_point(fit_k, platform, TwoStageLaw(b["r_sm_GBps"], b["Q_eff_MiB"], b["per_sm"],
                                                            b["epilogue_fixed"], cv))} for cv in GRID_COVER]
    best = best_of(cover_grid)
    refit = TwoStageLaw(best["r_sm_GBps"], best["Q_eff_MiB"], best["per_sm"], best["epilogue_fixed"], best["cover_us"])
    laws = {"two_stage": recorded, "refit": refit}
    f2 = speedups(kernel, platform, laws)
    f2["half"] = np.where(f2["config"].map(shape_of).isin(fit_groups), "fit", "held-out")
    fo = speedups(kernel_old, platform, laws)
    names2 = ["one_stage", "two_stage", "refit"]
    part2 = {h: summary(f2[f2["half"] == h], names2) for h in ("fit", "held-out")}
    part2["old_run"] = summary(fo, names2)
    print(f"\nPart 2: split (seed {args.seed}) fit {len(fit_groups)} shape groups, held out {len(held_groups)}")
    print(f"  refitted on the fit half: r_sm {refit.r_sm_GBps} GB/s, Q_eff {refit.q_eff_MiB} MiB, per_sm {refit.per_sm}, "
          f"epilogue fixed part {refit.epilogue_fixed}, cover {refit.cover_us} us")
    for g in cover_grid:
        print(f"    cover {g['cover_us']:5.1f} us: fit mean {g['fit_mean_pp']:.2f} pp, median {g['fit_median_pp']:.2f}, "
              f"{g['fit_n_names_winner']} of {g['fit_n_distinct']}")
    print(f2.assign(config=f2["config"].str.replace("-s0", "")).round(3).to_string(index=False))
    print(f"  old run {old.name}:")
    print(fo.assign(config=fo["config"].str.replace("-s0", "")).round(3).to_string(index=False))
    for h, s in part2.items():
        for n in names2:
            print(f"  {h:9s} {n:10s} {line(s[n])}")

    missed = {"part1_two_stage": misses(f1, "two_stage"), "part2_refit": misses(f2, "refit"),
              "old_run_refit": misses(fo, "refit")}
    for key, rows in missed.items():
        print(f"  misses {key}: " + "; ".join(f"{r['config'].replace('-s0', '')} {r['measured']:.3f} vs "
                                              f"{r['replayed']:.3f} (spread {r['timing_spread']:.3f})" for r in rows))
    held = part2["held-out"]
    cand = min(("two_stage", "refit"), key=lambda n: held[n]["median_pp"])
    better = held[cand]["median_pp"] < held["one_stage"]["median_pp"] and \
        held[cand]["n_names_winner"] >= held["one_stage"]["n_names_winner"]
    law = laws[cand]
    adopted_fit = {"r_sm_GBps": law.r_sm_GBps, "Q_eff_MiB": law.q_eff_MiB, "per_sm": law.per_sm,
                   "epilogue_fixed": law.epilogue_fixed, "cover_us": law.cover_us,
                   "fitted_on": (str(law_path.name) + " (run-d815b94, its fit half)") if cand == "two_stage"
                   else f"{records.name}, fit half (seed {args.seed})"}
    print(f"\nadopted: {cand if better else 'none'} ({line(held[cand])} held out vs one-stage {line(held['one_stage'])})")
    record = {"records": records.name, "old_records": old.name, "law_record": law_path.name,
              "platform": args.platform, "seed": args.seed,
              "split_rule": "sorted shape groups (config without routing) permuted by numpy default_rng(seed); "
                            "first half fits", "fit_groups": fit_groups, "held_out_groups": held_groups,
              "part1_fully_held_out": part1,
              "part1_configs": f1.to_dict("records"),
              "grid": grid, "cover_grid": cover_grid,
              "refit": {k: best[k] for k in ("r_sm_GBps", "Q_eff_MiB", "per_sm", "epilogue_fixed", "cover_us")},
              "misses": missed,
              "part2": part2, "part2_configs": f2.to_dict("records"), "old_run_configs": fo.to_dict("records"),
              "adoption_rule": "the candidate (recorded or refitted law) with the lower held-out median pp, adopted "
                               "only if it beats the one-stage replay there in median pp and names at least as "
                               "many winners", "candidate": cand, "adopted": bool(better), "fitted": adopted_fit,
              "provenance": provenance()}
    atomic_write_text(out, json.dumps(record, indent=1, default=str), overwrite=args.overwrite)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    exit_with(main, "moe_law_heldout.py")
