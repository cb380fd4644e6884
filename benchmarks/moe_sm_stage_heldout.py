"""Held-out test of the MoE two-stage replay (per-SM store rate r_sm in front of a shared buffer Q_eff).

``benchmarks/moe_magnitudes.py`` fitted r_sm and Q_eff from the tile logs of one shape and tested on the
configurations without tile logs. The run ``data/moe/run-d815b94`` logs the tiles of all 20 configurations,
so here the configurations are split into a fit half and a held-out half by whole shape groups (everything
in the configuration name but the routing, so both routings of a shape fall on the same side): the sorted
groups are permuted by ``numpy.random.default_rng(--seed)`` and the first half of the permutation is the fit
half. The slow-down delta, r_sm and Q_eff come from the fit half's tile logs only (``tile_figures`` and
``two_stage_fit`` of moe_magnitudes.py); every configuration is then replayed with today's replay and the
two-stage replay, and the speedup's relative error (median, p90) and sign agreement (over configurations
whose two orders differ) are printed per half and written to ``--out`` with provenance.

    python benchmarks/moe_sm_stage_heldout.py [--records data/moe/run-d815b94] [--seed 0]
        [--out data/predictions/moe-sm-stage-heldout.json] [--overwrite]
"""

import json

import numpy as np
import pandas as pd

from moe_magnitudes import heldout_run_args, SCHEDS, configurations, load_tiles, makespan, short, tile_figures, two_stage, two_stage_fit
from xstage.compare.moe_records import load_kernel_records
from xstage.errors import InputError, exit_with
from xstage.provenance import provenance
from xstage.records import atomic_write_text
from xstage.sim.platform import load_platform

ROUTINGS = ("-balanced", "-skewed")


def shape_of(cfg: str) -> str:
    """The configuration name without its routing: both routings of a shape share it."""
    for r in ROUTINGS:
        cfg = cfg.replace(r, "")
    return short(cfg)


def split(configs, seed: int) -> tuple[list, list]:
    """(fit, held-out) shape groups: the sorted groups permuted by the seeded generator, first half fits."""
    groups = sorted({shape_of(c) for c in configs})
    perm = [groups[i] for i in np.random.default_rng(seed).permutation(len(groups))]
    half = len(perm) // 2
    return sorted(perm[:half]), sorted(perm[half:])


def replays(kernel: pd.DataFrame, platform, fit2) -> pd.DataFrame:
    """Measured and replayed speedups (today, 2stage) of every configuration."""
    rows = []
    for cfg, _r, cr, s, copy in configurations(kernel, platform):
        row = {"config": cfg, "measured": float(cr["speedup_interleaved"]), "identical": bool(cr["schedules_identical"])}
        for name, plat, epi in (("today", platform, None), ("2stage", two_stage(copy, *fit2), 0.0)):
            ms = {sc: makespan(s, sc, plat, epi_fixed=epi) for sc in SCHEDS}
            row[name] = ms["expert_wave"] / ms["interleaved"]
        rows.append(row)
    return pd.DataFrame(rows)


def errors(frame: pd.DataFrame, name: str) -> dict:
    rel = np.abs(frame[name] - frame["measured"]) / frame["measured"]
    dist = frame[~frame["identical"]]
    agree = int((np.sign(dist[name] - 1) == np.sign(dist["measured"] - 1)).sum())
    return {"n": len(frame), "median_rel_err": float(np.median(rel)), "p90_rel_err": float(np.percentile(rel, 90)),
            "sign_agree_distinct": f"{agree}/{len(dist)}"}


def main(argv=None) -> int:
    args, records, out = heldout_run_args(argv, __doc__.splitlines()[0], "moe-sm-stage-heldout.json")
    platform = load_platform(args.platform)
    kernel = load_kernel_records(records)
    copy = kernel.drop_duplicates("config", keep="last").set_index("config")["combine_copy(GBps)"].to_dict()
    tiles = load_tiles(records, "moe-tile.parquet")
    missing = sorted(set(kernel["config"]) - set(tiles["config"]))
    if missing:
        raise InputError("--records", str(records), f"has no tile log for {missing[0]}")
    fit_groups, held_groups = split(kernel["config"].unique(), args.seed)
    fit_tiles = tiles[tiles["config"].map(shape_of).isin(fit_groups)]
    _, delta = tile_figures(fit_tiles, platform, copy)
    fit2 = two_stage_fit(fit_tiles, delta, copy)
    print(f"split (seed {args.seed}, whole shape groups, both routings together):")
    print(f"  fit      {', '.join(fit_groups)}")
    print(f"  held out {', '.join(held_groups)}")
    print(f"fit half: delta L1 {delta['L1']:.2f} us, L2 {delta['L2']:.2f} us; r_sm = {fit2[0] / 1e3:.3f} GB/s per SM, "
          f"Q_eff = {fit2[1] / 2**20:.2f} MiB (platform Q(132) = {platform.capacity_bytes(132) / 2**20:.2f} MiB)\n")
    frame = replays(kernel, platform, fit2)
    frame["half"] = np.where(frame["config"].map(shape_of).isin(fit_groups), "fit", "held-out")
    table = frame.assign(config=frame["config"].map(short))
    print(table[["half", "config", "identical", "measured", "today", "2stage"]].round(3).to_string(index=False))
    result = {h: {n: errors(frame[frame["half"] == h], n) for n in ("today", "2stage")} for h in ("fit", "held-out")}
    rows = [{"half": h, "replay": n, **e} for h, d in result.items() for n, e in d.items()]
    print("\nspeedup (expert-wave / interleaved) relative error; sign over configurations whose orders differ:")
    print(pd.DataFrame(rows).round(4).to_string(index=False))
    record = {"records": str(records), "platform": args.platform, "seed": args.seed,
              "split_rule": "sorted shape groups (config without routing) permuted by numpy default_rng(seed); "
                            "first half fits",
              "fit_groups": fit_groups, "held_out_groups": held_groups,
              "fit": {"delta_L1_us": delta["L1"], "delta_L2_us": delta["L2"], "r_sm_GBps": fit2[0] / 1e3,
                      "Q_eff_MiB": fit2[1] / 2**20},
              "summary": result,
              "configs": frame.assign(config=frame["config"].astype(str)).to_dict("records"),
              "provenance": provenance()}
    atomic_write_text(out, json.dumps(record, indent=1, default=str), overwrite=args.overwrite)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    exit_with(main, "moe_sm_stage_heldout.py")
