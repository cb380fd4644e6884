"""The fourth MoE rule (``compare.moe_rule4``): fitted on the fit run, pre-registered on new configurations, scored.

    python benchmarks/moe_rule4.py fit [--overwrite]
        grid over r_sm x cover_frac (Q_eff = rule 3's 0.1 MiB, drain = the platform's R) on the fit run's
        configurations (data/moe/run-d4c3a13-gluon); the point with the least mean |pp| (ties: the lower median)
        is the rule (data/predictions/moe-rule4-fit.json). The record keeps the grid, the fit table (rules 1-4)
        and the same table on the earlier held-out runs and on heldout2 (post hoc: rule 4 was designed after
        heldout2 was seen; nothing was fitted on them).
    python benchmarks/moe_rule4.py preregister [--overwrite]
        a-priori speedups of hw/moe/sweep_heldout3.HELDOUT3 under the four rules (per-tile medians, copy rate
        and leads predicted from the fit run: compare.moe_apriori), before the run
        (data/predictions/moe-rule4-preregistered.json, with the commit).
    python benchmarks/moe_rule4.py score --records data/moe/run-<sha>-heldout3 [--overwrite]
        the four rules replayed on the run's measured medians, and the pre-registered a-priori speedups,
        against the measured ones (data/predictions/moe-rule4-<run without run->.json).
pp = |replayed - measured speedup (expert-wave / interleaved)| x 100.
"""

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd

import moe_rule3 as r3
from moe_law_heldout import speedups
from xstage.compare.moe_apriori import apriori_row, fit_tile_model, timings_of
from xstage.compare.moe_records import load_kernel_records, simulate
from xstage.compare.moe_rule3 import load_rule3, rule3_makespans
from xstage.compare.moe_rule4 import RULE4_RECORD, Rule4, load_rule4, rule4_makespans, rule4_speedups
from xstage.compare.moe_two_stage import adopted_law, law_platform
from xstage.errors import InputError, exit_with
from xstage.paths import data_dir
from xstage.provenance import provenance
from xstage.records import atomic_write_text
from xstage.sim.platform import load_platform

GRID_R_SM = (0.35, 0.4, 0.45, 0.5, 0.6)   # GB/s per SM
GRID_COVER = (0.0, 0.6, 0.75, 0.9, 1.0)
Q_EFF_MiB = 0.1                            # rule 3's
PREREG = "moe-rule4-preregistered.json"
RULES = ("one_stage", "two_stage", "rule3", "rule4")
POST_HOC = ("run-333d725-heldout2",)


def write(path: Path, rec: dict, overwrite: bool) -> None:
    """As ``moe_rule3.write``, compact (the wheel's records are near their 16 MiB bound)."""
    if path.exists() and not overwrite:
        raise InputError("--out", str(path), "already exists (pass --overwrite to replace it)")
    atomic_write_text(path, json.dumps(rec, separators=(",", ":"), default=float), overwrite=overwrite)
    print(f"wrote {path}")


def table(kernel, platform, law, rule3, rule4) -> pd.DataFrame:
    f = r3.table(kernel, platform, law, rule3)
    f["rule4"] = rule4_speedups(kernel, platform, rule4)
    return f


def fit(d: Path, platform, law, rule3) -> dict:
    kernel = load_kernel_records(d / "moe" / r3.FIT_RUN)
    measured = speedups(kernel, platform, {}).set_index("config")["measured"]
    grid = []
    for r, c in itertools.product(GRID_R_SM, GRID_COVER):
        pp = (rule4_speedups(kernel, platform, Rule4(r, Q_EFF_MiB, c)) - measured).abs().dropna() * 100
        grid.append({"r_sm_GBps": r, "cover_frac": c, "mean_pp": float(pp.mean()), "median_pp": float(pp.median())})
        print(f"r_sm {r:.2f} cover {c:.2f}: mean {grid[-1]['mean_pp']:.2f} median {grid[-1]['median_pp']:.2f} pp")
    best = min(grid, key=lambda g: (round(g["mean_pp"], 6), g["median_pp"]))
    rule4 = Rule4(best["r_sm_GBps"], Q_EFF_MiB, best["cover_frac"])
    f = table(kernel, platform, law, rule3, rule4)
    others = {}
    for run in r3.OLD_HELDOUT + POST_HOC:
        k = load_kernel_records(d / "moe" / run)
        t = table(k[k["precision"] == "bf16"], platform, law, rule3, rule4)
        others[run] = {"summary": r3.summary(t, ("one_stage", "two_stage", "rule3", "rule4")), "rows": r3.rows(t)}
    return {"records": r3.FIT_RUN, "platform": platform.name, "law": law.source, "rule3": rule3.source,
            "fitted": {"r_sm_GBps": rule4.r_sm_GBps, "Q_eff_MiB": rule4.q_eff_MiB, "cover_frac": rule4.cover_frac,
                       "cover_tiles": "L1", "per_sm": True, "drain": "platform", "staging_slots": 1},
            "criterion": "least mean |pp| over the fit run's configurations (ties: the lower median)",
            "grid": grid, "fit": {"summary": r3.summary(f, ("one_stage", "two_stage", "rule3", "rule4")),
                                  "rows": r3.rows(f)},
            "other_runs": others,
            "note": "run-333d725-heldout2 is post hoc for rule 4 (its misses motivated the rule); the older "
                    "held-out runs were seen before too; nothing was fitted on any of them",
            "provenance": provenance()}


def apriori(platform, law, rule3, rule4, fit_kernel) -> tuple:
    """(tile model, per configuration of HELDOUT3: the four rules' a-priori speedups, mean over the leads)."""
    from xstage.hw.moe.bench import SHORT_K_MAX
    from xstage.hw.moe.sweep_heldout3 import HELDOUT3
    from xstage.sim.schedules import make_moe_schedule
    from xstage.sim.workloads.moe_layout import dispatch_layout

    model = fit_tile_model(fit_kernel, platform.sm_count)
    out = []
    for _model, h, i, t, routing, _prec, world, e in HELDOUT3:
        problem, row, leads = apriori_row(model, h, i, t, e, routing, SHORT_K_MAX, balance_short=True,
                                          world_size=world)
        lay, tim = dispatch_layout(problem), timings_of(row)
        law_plat = law_platform(platform, law, row["combine_copy(GBps)"], row["programs_per_sm"])
        tim_law = {**tim, "l2_epilogue_us": tim["l2_epilogue_us"] if law.epilogue_fixed else 0.0}
        per = {n: [] for n in RULES}

        def mk(kind, **kw):
            return make_moe_schedule(kind, lay.grid, row["num_sms"], group_rows=row["group_rows"],
                                     balance=row["balance"], **kw)

        for lead in leads:
            for name, plat, tm, cover in (("one_stage", platform, tim, 0.0),
                                          ("two_stage", law_plat, tim_law, law.cover_us)):
                per[name].append(simulate(lay, mk("expert_wave"), tm, plat, cover_us=cover)
                                 / simulate(lay, mk("interleaved", lead_rows=lead), tm, plat, cover_us=cover))
            for name, fn, rule in (("rule3", rule3_makespans, rule3), ("rule4", rule4_makespans, rule4)):
                w, it = fn(lay, {**row, "lead_rows": lead}, tim, platform, rule)
                per[name].append(w / it)
        cfg = f"h{h}-i{i}-t{t}-e{e}-{routing}-bf16-w{world}-s0"
        out.append({"config": cfg, "programs_per_sm": row["programs_per_sm"], "leads": leads,
                    **{n: float(np.mean(v)) for n, v in per.items()},
                    **{f"{n}_by_lead": [float(x) for x in v] for n, v in per.items()}})
        print(f"{cfg:44s} " + " ".join(f"{n} {out[-1][n]:.3f}" for n in RULES))
    return model, out


def score(records: Path, d: Path, platform, law, rule3, rule4) -> dict:
    f = table(load_kernel_records(records), platform, law, rule3, rule4)
    pre_path = d / "predictions" / PREREG
    pre = json.loads(pre_path.read_text()) if pre_path.is_file() else None
    if pre is not None:
        ap = pd.DataFrame(pre["configs"]).set_index("config")
        for n in RULES:
            f[f"apriori_{n}"] = ap[n].reindex(f.index)
    out = r3.summary(f, RULES + ("two_stage_platform_drain",) + tuple(f"apriori_{n}" for n in RULES
                                                                       if pre is not None))
    for n, e in out.items():
        print(f"{n}: median {e['median_pp']:.2f} / p90 {e['p90_pp']:.2f} pp over {e['n']}; winner named in "
              f"{e['n_names_winner']} of {e['n_distinct']}")
    return {"records": records.name, "platform": platform.name, "rule3": rule3.source, "rule4": rule4.source,
            "law": law.source, "preregistered": pre.get("provenance", {}).get("git_commit") if pre else None,
            "summary": out, "rows": r3.rows(f), "provenance": provenance()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("fit", "preregister", "score"))
    ap.add_argument("--records", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    d = data_dir()
    law, rule3 = adopted_law(d), load_rule3(d)
    if law is None or rule3 is None:
        raise InputError("adopted law / rule 3", str(d / "predictions"), "holds no adopted law or no rule-3 record")
    platform = load_platform(law.platform or "h200-pcie-host")
    if args.step == "fit":
        write(Path(args.out) if args.out else d / "predictions" / RULE4_RECORD, fit(d, platform, law, rule3),
                 args.overwrite)
        return 0
    rule4 = load_rule4(d)
    if rule4 is None:
        raise InputError("rule-4 record", str(d / "predictions" / RULE4_RECORD), "is missing (run the fit step)")
    if args.step == "preregister":
        model, configs = apriori(platform, law, rule3, rule4, load_kernel_records(d / "moe" / r3.FIT_RUN))
        rec = {"rule3": rule3.source, "rule4": rule4.source, "law": law.source, "platform": platform.name,
               "fit_records": r3.FIT_RUN, "sweep": "hw/moe/sweep_heldout3.py HELDOUT3", "tile_model": model.as_dict(),
               "method": "a priori, as moe-rule3-preregistered.json: per-tile medians linear in K per kernel class, "
                         "epilogues and copy rate the class medians of the fit run; speedup = mean over the "
                         "bench's candidate leads",
               "configs": configs, "provenance": provenance()}
        write(Path(args.out) if args.out else d / "predictions" / PREREG, rec, args.overwrite)
        return 0
    if not args.records or not (Path(args.records) / "moe-kernel.parquet").is_file():
        raise InputError("--records", args.records, "must be a run folder holding moe-kernel.parquet")
    name = Path(args.records).name.removeprefix("run-")
    write(Path(args.out) if args.out else d / "predictions" / f"moe-rule4-{name}.json",
             score(Path(args.records), d, platform, law, rule3, rule4), args.overwrite)
    return 0


if __name__ == "__main__":
    exit_with(main, "moe_rule4")
