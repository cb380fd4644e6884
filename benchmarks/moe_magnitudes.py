"""Why the MoE replay's speedup magnitudes miss (fidelity issue, item 6): each candidate cause as a replay change.

For every committed MoE configuration (``data/moe``, latest run of a configuration wins, as in
``xstage results moe``) both schedules are replayed on the configuration's own layout, with the tuned lead D
and the SM count of its kernel record, exactly as ``compare.moe_records.resimulate`` does ("today"), then
once per candidate correction:

    R=copy      the same platform with R = the measured Combine-copy rate of that configuration
    b200        paper-b200 scaled to 132 SMs, R = the copy rate (the bench's fallback platform)
    epi         remote epilogue = the logged issue span: the fixed part before the stores becomes
                max(L2 local span - T_iss0(K, B), 0), so an uncontended replay span equals the logged one
                (today the replay adds T_iss0 on top of the whole local span)
    L2cache     per-schedule mainloops: both schedules' mainloops scaled so that the replay with remote
                stores off reproduces the measured local-store time of that schedule (cache locality)
    slow        mainloop slow-down behind the program's own remote stores: a mainloop that follows a tile
                with remote bytes on the same program takes + delta(kind) us, delta fitted from the tile logs
    coupled     the completion-coupled counterfactual (an epilogue ends when its bytes drained)
    2stage      a per-SM store rate r_sm in front of a small shared buffer Q_eff and the link: each program's
                bytes leave it at most at r_sm (the producer rate; T_iss0 -> B / r_sm) and its next mainloop
                waits for them (staging_slots = 1, as today); r_sm = L2-tile bytes / the logged L2 slow-down
                delta, Q_eff = median peak X-Stage level of the logged runs with bytes leaving at r_sm.
                Both come from the tile logs only; the other 16 configurations are held out.
and combinations. The tile-logged configurations get a further oracle, "logged ml": each tile's mainloop is
the duration logged for it in the remote-store run (what the replay would give if it knew the slow-downs).

The tile logs (``moe-tile-small.parquet``: h2048/I4096/8K, bf16 and W8A8, balanced and skewed) first give
the figures behind each candidate: logged issue spans against T_iss0, mainloop medians with remote and
local stores by kind and by whether the program's previous tile stored remotely, the X-Stage occupancy those
tiles start under (a fluid estimate at R = the copy rate), and a check that the replayed schedule and bytes
are the hardware's tile for tile.

    python benchmarks/moe_magnitudes.py [--records data/moe] [--platform h200-pcie-host]
"""

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.compare.moe_records import load_kernel_records, per_config, problem_fields, scaled_b200
from xstage.errors import InputError, exit_with
from xstage.paths import data_dir
from xstage.records import load_records
from xstage.records.moe import measured
from xstage.sim.platform import load_platform
from xstage.sim.replay import ReplayConfig, replay
from xstage.sim.schedules import make_moe_schedule
from xstage.sim.workloads.moe_layout import MoeProblem, dispatch_layout

KEYS = ("l1_us", "l2_us", "l1_epilogue_us", "l2_epilogue_us")
SCHEDS = ("expert_wave", "interleaved")


# --- tile logs ------------------------------------------------------------------------------------
def load_tiles(records: Path, pattern: str = "**/moe-tile*.parquet") -> pd.DataFrame:
    """Tile records under ``records`` matching ``pattern``; later reruns (``run-*/`` folders, analysed by
    ``moe_sm_stage_heldout.py``) are left out so that one configuration's tiles are read once."""
    files = [f for f in sorted(records.glob(pattern))
             if not any(part.startswith("run-") for part in f.relative_to(records).parts[:-1])]
    frames = [load_records(f, "tile")[0] for f in files]
    if not frames:
        raise InputError("records", str(records), f"hold no {pattern} files")
    t = pd.concat(frames, ignore_index=True)
    t["ml(us)"] = t["mainloop_end(us)"] - t["mainloop_start(us)"]
    t = t.sort_values(["config", "schedule", "sm", "seq"], kind="stable").reset_index(drop=True)
    t["after_remote"] = t.groupby(["config", "schedule", "sm"])["bytes_remote"].shift(1).fillna(0) > 0
    return t


def occupancy_at(f: pd.DataFrame, when, rate_Bpus: float) -> np.ndarray:
    """Fluid X-Stage level (bytes) at times ``when``: each tile's bytes arrive at its issue end, drain at R."""
    ev = f[f["bytes_remote"] > 0].sort_values("issue_end(us)")
    ta, b = ev["issue_end(us)"].to_numpy(), ev["bytes_remote"].to_numpy(dtype=float)
    level, cur, prev = np.zeros(len(ta)), 0.0, 0.0
    for i, (x, y) in enumerate(zip(ta, b)):
        cur = max(cur - rate_Bpus * (x - prev), 0.0) + y
        prev, level[i] = x, cur
    i = np.searchsorted(ta, when, side="right") - 1
    j = np.maximum(i, 0)
    return np.where(i >= 0, np.maximum(level[j] - rate_Bpus * (np.asarray(when) - ta[j]), 0.0), 0.0)


def two_stage_fit(t: pd.DataFrame, delta: dict, copy_GBps: dict) -> tuple[float, float]:
    """(r_sm in B/us, Q_eff in bytes) from the remote-store tile logs (see the module docstring)."""
    remote = t[(t["bytes_remote"] > 0) & ~t["schedule"].str.endswith("_local")]
    r_sm = float(remote["bytes_remote"].median()) / delta["L2"]
    peaks = []
    for (cfg, _), f in remote.groupby(["config", "schedule"]):
        start = f["issue_start(us)"].to_numpy()
        end = start + f["bytes_remote"].to_numpy(dtype=float) / r_sm
        tt = np.unique(np.concatenate([start, end]))
        step = np.zeros(len(tt))
        np.add.at(step, np.searchsorted(tt, start), r_sm)
        np.add.at(step, np.searchsorted(tt, end), -r_sm)
        inflow, level, peak = np.cumsum(step), 0.0, 0.0
        for i in range(len(tt) - 1):
            level = max(level + (inflow[i] - copy_GBps[cfg] * 1e3) * (tt[i + 1] - tt[i]), 0.0)
            peak = max(peak, level)
        peaks.append(peak)
    return r_sm, float(np.median(peaks))


def two_stage(platform, r_sm_Bpus: float, q_bytes: float):
    """``platform`` with the producer rate capped at r_sm (no fixed issue part) and every Q(K) set to q_bytes."""
    return replace(platform, producer_issue_GBps=r_sm_Bpus / 1e3, t_fixed_us=0.0,
                   capacity_points=tuple((k, q_bytes) for k, _ in platform.capacity_points))


def tile_figures(t: pd.DataFrame, platform, copy_GBps: dict) -> tuple[pd.DataFrame, dict]:
    """Per (config, schedule, kind): logged mainloop medians (local, remote; remote split by the previous
    tile's stores), issue spans, occupancy at mainloop start; and the pooled slow-down delta per kind."""
    rows, extra = [], {"L1": [], "L2": []}
    for (cfg, sched), f in t[~t["schedule"].str.endswith("_local")].groupby(["config", "schedule"]):
        loc = t[(t["config"] == cfg) & (t["schedule"] == f"{sched}_local")]
        occ = occupancy_at(f, f["mainloop_start(us)"].to_numpy(), copy_GBps[cfg] * 1e3) / 2**20
        f = f.assign(occ=occ)
        for kind, g in f.groupby("kind", observed=True):
            base = float(loc.loc[loc["kind"] == kind, "ml(us)"].median())
            after = g[g["after_remote"]]
            extra[kind].append(after["ml(us)"].to_numpy() - base)
            remote = g["bytes_remote"] > 0
            b = float(g.loc[remote, "bytes_remote"].median()) if remote.any() else 0.0
            rows.append({"config": short(cfg), "schedule": sched, "kind": kind, "tiles": len(g),
                         "ml_local": base, "ml_remote": float(g["ml(us)"].median()),
                         "ml_after_remote": float(after["ml(us)"].median()) if len(after) else np.nan,
                         "ml_after_local": float(g.loc[~g["after_remote"], "ml(us)"].median()),
                         "n_after_remote": len(after),
                         "span_local": float(loc.loc[loc["kind"] == kind, "span(us)"].median()),
                         "span_remote": float(g["span(us)"].median()),
                         "T_iss0": platform.issue_time0_us(132, b) if b else np.nan,
                         "occ_MiB_med": float(np.median(g["occ"])), "occ_MiB_max": float(g["occ"].max())})
    delta = {k: float(np.median(np.concatenate(v))) for k, v in extra.items() if v}
    return pd.DataFrame(rows), delta


# --- replays --------------------------------------------------------------------------------------
def setup(row) -> dict:
    lay = dispatch_layout(MoeProblem(**problem_fields(row)))
    sms, lead = int(row["num_sms"]), int(row["lead_rows"])
    scheds = {s: make_moe_schedule(s, lay.grid, sms, **({"lead_rows": lead} if s == "interleaved" else {}))
              for s in SCHEDS}
    return {"layout": lay, "schedules": scheds, "timings": {k: float(row[measured(k)]) for k in KEYS}}


def mainloops(sched, timings, *, delta=None, factor=1.0, remote=None) -> np.ndarray:
    kind = sched.tiles[:, 0]
    ml = np.where(kind == 1, timings["l2_us"], timings["l1_us"]) * factor
    if delta:  # + delta(kind) where the program's previous tile stored remote bytes
        prev_remote = np.zeros(len(kind), dtype=bool)
        prev_remote[1:] = remote[:-1] > 0
        prev_remote[sched.sm_offsets[:-1][sched.sm_offsets[:-1] < len(kind)]] = False
        ml = ml + np.where(prev_remote, np.where(kind == 1, delta["L2"], delta["L1"]), 0.0)
    return ml


def makespan(s, sched_name, platform, *, epi_fixed=None, factor=1.0, delta=None, coupled=False, local=False,
             ml=None, pool_GBps=None) -> float:
    lay, sched, tm = s["layout"], s["schedules"][sched_name], s["timings"]
    nbytes = lay.tile_remote_bytes(sched.tiles) * (0.0 if local else 1.0)
    if ml is None:
        ml = mainloops(sched, tm, delta=delta, factor=factor, remote=nbytes)
    cfg = ReplayConfig(staging_slots=1, local_epilogue_us=tm["l1_epilogue_us"], coupled=coupled,
                       remote_epilogue_us=tm["l2_epilogue_us"] if epi_fixed is None else epi_fixed,
                       record_occupancy=False, sm_pool_GBps=pool_GBps)
    return replay(sched, ml, nbytes, platform, cfg).makespan_us


def epi_fixed_us(s, platform) -> float:
    """Fixed remote-epilogue part so that the uncontended replay span (fixed + T_iss0) is the logged span."""
    b = s["layout"].tile_remote_bytes(s["schedules"]["expert_wave"].tiles)
    k = s["schedules"]["expert_wave"].num_sms
    return max(s["timings"]["l2_epilogue_us"] - platform.issue_time0_us(k, float(np.median(b[b > 0]))), 0.0)


def local_factors(s, platform, measured_local: dict) -> dict:
    return {sc: measured_local[sc] / makespan(s, sc, platform, local=True) for sc in SCHEDS}


def configurations(kernel: pd.DataFrame, platform):
    """Each configuration's (name, its interleaved row, its per_config row, setup, the platform at the
    Combine copy's rate) -- what every replay of the committed MoE runs starts from."""
    c = per_config(kernel).set_index("config")
    inter = kernel[kernel["variant"] == "interleaved"].drop_duplicates("config", keep="last").set_index("config")
    for cfg, r in inter.iterrows():
        yield cfg, r, c.loc[cfg], setup(r), replace(platform, drain_rate_GBps=float(r["combine_copy(GBps)"]))


def speedups(kernel: pd.DataFrame, platform, delta: dict, tiles: pd.DataFrame | None, fit2=None) -> pd.DataFrame:
    out = []
    for cfg, r, cr, s, copy in configurations(kernel, platform):
        b200 = scaled_b200(int(r["num_sms"]), float(r["combine_copy(GBps)"]))
        epi = epi_fixed_us(s, platform)
        fac = local_factors(s, platform, {"expert_wave": cr["expert_wave_local(us)"],
                                          "interleaved": cr["interleaved_local(us)"]})
        variants = {
            "today": {}, "R=copy": {"plat": copy}, "b200": {"plat": b200}, "epi": {"epi_fixed": epi},
            "L2cache": {"factor": fac}, "slow": {"delta": delta}, "coupled": {"coupled": True},
            "epi+L2cache": {"epi_fixed": epi, "factor": fac},
            "epi+L2cache+slow": {"epi_fixed": epi, "factor": fac, "delta": delta},
            "epi+L2cache+slow+R=copy": {"epi_fixed": epi, "factor": fac, "delta": delta, "plat": copy}}
        if fit2 is not None:
            variants["2stage"] = {"epi_fixed": 0.0, "plat": two_stage(copy, *fit2)}
            variants["2stage+L2cache"] = {"epi_fixed": 0.0, "plat": two_stage(copy, *fit2), "factor": fac}
        row = {"config": cfg, "measured": cr["speedup_interleaved"],
               "identical": bool(cr["schedules_identical"]),
               "meas_wave(us)": cr["expert_wave(us)"], "meas_int(us)": cr["interleaved(us)"]}
        for name, v in variants.items():
            ms = {sc: makespan(s, sc, v.get("plat", platform), epi_fixed=v.get("epi_fixed"),
                               factor=v.get("factor", {}).get(sc, 1.0), delta=v.get("delta"),
                               coupled=v.get("coupled", False)) for sc in SCHEDS}
            row[name] = ms["expert_wave"] / ms["interleaved"]
            row[f"{name}:wave(us)"], row[f"{name}:int(us)"] = ms["expert_wave"], ms["interleaved"]
        if tiles is not None and cfg in set(tiles["config"]):
            ms = {}
            for sc in SCHEDS:
                f = tiles[(tiles["config"] == cfg) & (tiles["schedule"] == sc)]
                sched = s["schedules"][sc]
                order = pd.DataFrame({"sm": sched.tiles[:, 4], "seq": sched.tiles[:, 5]})
                ml = order.merge(f[["sm", "seq", "ml(us)"]], on=["sm", "seq"], how="left")["ml(us)"].to_numpy()
                ms[sc] = makespan(s, sc, platform, epi_fixed=epi, ml=ml)
            row["logged ml"] = ms["expert_wave"] / ms["interleaved"]
        out.append(row)
    return pd.DataFrame(out)


def short(cfg: str) -> str:
    return str(cfg).replace("-e8", "").replace("-s0", "")


def summary(frame: pd.DataFrame, names) -> pd.DataFrame:
    rows = []
    for name in names:
        have = frame[np.isfinite(frame[name])] if name in frame else frame.iloc[:0]
        if not len(have):
            continue
        dist = have[~have["identical"]]
        rel = np.abs(have[name] - have["measured"]) / have["measured"]
        pp = np.abs(have[name] - have["measured"]) * 100
        agree = np.sign(dist[name] - 1) == np.sign(dist["measured"] - 1)
        ew = np.abs(have[f"{name}:wave(us)"] / have["meas_wave(us)"] - 1) if f"{name}:wave(us)" in have else np.nan
        ei = np.abs(have[f"{name}:int(us)"] / have["meas_int(us)"] - 1) if f"{name}:int(us)" in have else np.nan
        rows.append({"replay": name, "n": len(have), "median_rel_err": float(np.median(rel)),
                     "p90_rel_err": float(np.percentile(rel, 90)), "median_pp": float(np.median(pp)),
                     "sign_agree_distinct": f"{int(agree.sum())}/{len(dist)}",
                     "wave_median_rel_err": float(np.median(ew)) if np.ndim(ew) else np.nan,
                     "int_median_rel_err": float(np.median(ei)) if np.ndim(ei) else np.nan})
    return pd.DataFrame(rows)


def heldout_run_args(argv, description: str, out_name: str):
    """The held-out scripts' common flags (--records run folder, default moe/run-d815b94; --platform; --seed;
    --out, default predictions/OUT_NAME; --overwrite): ``(args, records, out)``, checked (one line, exit 2)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--records", default=None, help="run folder (default: the data folder's moe/run-d815b94)")
    ap.add_argument("--platform", default="h200-pcie-host")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help=f"default: the data folder's predictions/{out_name}")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    records = Path(args.records) if args.records else data_dir() / "moe" / "run-d815b94"
    out = Path(args.out) if args.out else data_dir() / "predictions" / out_name
    if not records.is_dir():
        raise InputError("--records", str(records), "is not a folder")
    if out.exists() and not args.overwrite:
        raise InputError("--out", str(out), "already exists (pass --overwrite to replace it)")
    return args, records, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default=None, help="MoE records folder (default: the data folder's moe/)")
    ap.add_argument("--platform", default="h200-pcie-host")
    args = ap.parse_args(argv)
    records = Path(args.records) if args.records else data_dir() / "moe"
    if not records.is_dir():
        raise InputError("--records", str(records), "is not a folder")
    platform = load_platform(args.platform)
    kernel = load_kernel_records(records)
    copy = kernel.drop_duplicates("config", keep="last").set_index("config")["combine_copy(GBps)"].to_dict()
    tiles = load_tiles(records)
    figs, delta = tile_figures(tiles, platform, copy)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    print("Tile logs (us; occupancy in MiB at mainloop start, fluid estimate at R = copy rate):")
    print(figs.round(2).to_string(index=False))
    print(f"\nslow-down delta behind own remote stores (pooled median, us): "
          f"L1 {delta['L1']:.2f}, L2 {delta['L2']:.2f}\n")
    fit2 = two_stage_fit(tiles, delta, copy)
    print(f"two-stage fit from the tile logs: r_sm = {fit2[0] / 1e3:.3f} GB/s per SM "
          f"({fit2[0] * delta['L2'] / 1e3:.1f} KB per L2 tile in {delta['L2']:.1f} us), "
          f"Q_eff = {fit2[1] / 2**20:.2f} MiB (platform Q(132) = {platform.capacity_bytes(132) / 2**20:.2f} MiB)\n")
    frame = speedups(kernel, platform, delta, tiles[~tiles["schedule"].str.endswith("_local")], fit2)
    names = ["today", "R=copy", "b200", "epi", "L2cache", "slow", "coupled", "epi+L2cache", "epi+L2cache+slow",
             "epi+L2cache+slow+R=copy", "2stage", "2stage+L2cache"] + (["logged ml"] if "logged ml" in frame else [])
    table = frame[["config", "identical", "measured"] + names].copy()
    table["config"] = table["config"].map(short)
    print("Speedup (expert-wave / interleaved), measured and replayed:")
    print(table.round(3).to_string(index=False))
    print("\nSummary over configurations (relative error of the speedup; pp = percentage points; sign over the "
          "configurations whose two orders differ; wave/int: makespan errors):")
    print(summary(frame, names).round(4).to_string(index=False))
    held = frame[~frame["config"].isin(set(tiles["config"]))]
    print(f"\nHeld out (the {len(held)} configurations without tile logs, which fitted nothing):")
    print(summary(held, ["today", "2stage", "2stage+L2cache"]).round(4).to_string(index=False))
    print("\nSensitivity of the two-stage replay (all configurations; r_sm in GB/s, Q in MiB):")
    grid = []
    for r_sm in (0.5, fit2[0] / 1e3, 2.0):
        for q in (0.1, fit2[1] / 2**20, platform.capacity_bytes(132) / 2**20):
            f = speedups(kernel, platform, delta, None, (r_sm * 1e3, q * 2**20))
            grid.append(summary(f, ["2stage"]).assign(r_sm=r_sm, Q_MiB=q))
    print(pd.concat(grid)[["r_sm", "Q_MiB", "median_rel_err", "p90_rel_err", "median_pp", "sign_agree_distinct",
                           "wave_median_rel_err", "int_median_rel_err"]].round(4).to_string(index=False))
    return 0


if __name__ == "__main__":
    exit_with(main, "moe_magnitudes.py")
