"""FlashAttention + All-to-All (the paper's Fig. 11, Table 3): measured and simulated, per M.

Measured rows come from attention kernel records (``xstage.compare.attention_records.summary_rows``).
The simulated counterpart of a measured M replays the same Q-loop schedule (heads, M, b_m, one
program per SM) on the calibrated platform with the measured compute time as input -- the Q-loop
time of a tile is the measured FA-only time over the number of output-tile waves, as the paper's
prior predictions use "the once-calibrated platform parameters and measured compute-side timing".
A tile's bytes are remote unless its rows belong to the sender's own rank (the Ulysses layout:
b_m divides M / W). Three replays: FA-only, X-Stage-fused, completion-coupled.

Send point: the replay issues a tile at its Q-loop's end, unless the measured fused kernel used the
``stagger`` option (kernel rows' ``stagger`` column of variant "fused", or ",stagger" in the tile rows'
config label; older records have neither: tile end). Then each program's send goes ``send_due`` K/V
steps into its next Q-loop (``xstage.sim.schedule_fa.staggered_mainloops``), and the ``send`` column
says "stagger". Not modelled: the split tail (the last partial wave's tiles as K/V parts on two
programs, ",split-tail"), which the replay runs as whole tiles.

FA4 records (experiment ``attention-fa4``, ``compare_fa4``): every measured fused variant of every run
and M beside the same Q-loop replay, with FA4's FA-only time (``fa4``, or ``fa4_t<m>x<n>`` for a tile_mn
variant) over the waves as the Q-loop time and the tile-end send (FA4 has no stagger). All-host variants
(``fused_allhost*``, ``fused_cm``) send the own chunk over PCIe too; the others keep it in HBM. Not
modelled: chunk-major order, per-chunk launches and their start delays (``fused_perchunk_st<us>``), the
non-persistent CTA held until its bulk store has left shared memory. ``fused_hbm`` sends nothing and is
left out.
"""

import math
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.compare.metrics import add_relative_errors, sign_agreement
from xstage.sim.platform import Platform
from xstage.sim.replay import ReplayConfig, replay
from xstage.sim.schedule_fa import fa_qloop, staggered_mainloops
from xstage.sim.sweep import run_fa_config
from xstage.sim.workloads.catalog import fa_catalog

QUANTITIES = ["fused(us)", "speedup_vs_serial"]  # E_res is a difference near 0: no relative error
SENDS = {False: "tile end", True: "stagger"}  # the replay's send point (column ``send``)


def label_staggers(config) -> bool:
    """True when a kernel config label (``AttentionConfig.label``) names the stagger send."""
    return "stagger" in str(config).split(",")


def fused_rows(kernel: pd.DataFrame | None, M: int | None = None) -> pd.DataFrame:
    """The chosen fused kernel's rows (variant "fused"; at ``M`` when given): not a tuning or other option's."""
    if kernel is None or "variant" not in kernel:
        return pd.DataFrame()
    keep = kernel["variant"] == "fused"
    if M is not None and "M" in kernel:
        keep &= kernel["M"] == M
    return kernel[keep]


def kernel_staggers(kernel: pd.DataFrame | None, M: int | None = None) -> bool | None:
    """Whether the chosen fused kernel (``fused_rows``) used the stagger send: its ``stagger`` column,
    else its config label; None when the records hold no such row."""
    rows = fused_rows(kernel, M)
    if rows.empty:
        return None
    if "stagger" in rows and rows["stagger"].notna().any():
        return bool(rows["stagger"].dropna().iloc[-1])
    return label_staggers(rows["config"].iloc[-1]) if "config" in rows else False


def replay_mainloops(sched, qloop_us: float, n_steps: int, stagger: bool) -> np.ndarray:
    """Per-tile mainloop times of a Q-loop replay: every tile ``qloop_us``, shifted to the stagger's send points."""
    if stagger:
        return staggered_mainloops(sched, qloop_us, n_steps)
    return np.full(len(sched.tiles), float(qloop_us))


def simulated_catalog(platform: Platform, shapes=None, seq_lens=None) -> pd.DataFrame:
    """``run_fa_config`` over the catalog's shapes and sequence lengths (the sim-only page)."""
    cat = fa_catalog()
    rows = [run_fa_config(s, M, platform) for s in (shapes or list(cat["shapes"]))
            for M in (seq_lens or cat["seq_lens"])]
    out = pd.DataFrame(rows)
    out["E_res/T_FA"] = out["E_res_us"] / out["fa_us"]
    out["E_cc/T_FA"] = out["E_cc_us"] / out["fa_us"]
    return out


def measured_summary(kernel: pd.DataFrame) -> pd.DataFrame:
    """Per-M summary of attention kernel records (E_res, H, speedups), with the tile sizes used."""
    from xstage.compare.attention_records import SUMMARY_KEYS, summary_rows

    summary = pd.DataFrame(summary_rows(kernel))
    if summary.empty:
        return summary
    keys = [k for k in SUMMARY_KEYS if k in kernel and k in summary]  # W ranks: the slowest rank's times
    cols = [c for c in ("block_m", "block_n", "rank", "platform") if c in kernel and c not in keys]
    picked = []  # per key: the chosen fused kernel's tile sizes (not a tuning row's), and its send
    for key, g in kernel.groupby(keys, sort=True):
        fused = fused_rows(g)
        picked.append({**dict(zip(keys, key)), **(fused if len(fused) else g)[cols].iloc[0].to_dict(),
                       "stagger": bool(kernel_staggers(g))})
    summary = summary.merge(pd.DataFrame(picked), on=keys, how="left")
    summary["E_res/T_FA"] = summary["e_res_us"] / summary["fa_us"]
    return summary


def simulate_like(row: dict, platform: Platform, *, num_sms: int | None = None,
                  latency_us: float | None = None, all_remote: bool = False) -> dict:
    """Replay the measured configuration ``row`` (one line of ``measured_summary``); its ``stagger``
    (absent: False) sends each tile at the stagger's point of the next Q-loop instead of the tile's end.
    ``all_remote``: the sender's own rows cross the link too (one host-mapped buffer for all W chunks)."""
    M, heads, d, W = int(row["M"]), int(row["heads"]), int(row["head_dim"]), int(row["world_size"])
    bm = int(row.get("block_m") or 128)
    bn = int(row.get("block_n") or 128)
    rank = int(row.get("rank") or 0)
    sms = num_sms or platform.sm_count
    sched = fa_qloop(heads, M, sms, block_m=bm)
    T = len(sched.tiles)
    waves = math.ceil(T / sms)
    qloop = float(row["fa_us"]) / waves
    cover = qloop / math.ceil(M / bn)
    tile_bytes = bm * d * 2
    dest = sched.column("m_block") * bm // (M // W)
    nbytes = np.where((dest == rank) & (not all_remote), 0.0, float(tile_bytes))
    stagger = bool(row.get("stagger", False))
    ml = replay_mainloops(sched, qloop, M // bn, stagger)
    lat = fa_catalog()["completion_latency_us"] if latency_us is None else latency_us
    base = dict(staging_slots=0, cover_us=cover, remote_epilogue_us=0.0, local_epilogue_us=0.0,
                record_occupancy=False, producers=min(sms, T))
    only = replay(sched, np.full(T, qloop), np.zeros(T), platform, ReplayConfig(**base)).makespan_us
    fused = replay(sched, ml, nbytes, platform, ReplayConfig(**base)).makespan_us
    coupled = replay(sched, ml, nbytes, platform,
                     ReplayConfig(**base, coupled=True, completion_latency_us=lat)).makespan_us
    a2a = float(nbytes.sum()) / platform.drain_rate_Bpus
    return {"send": SENDS[stagger], "simulated_fa_only(us)": only, "simulated_fused(us)": fused,
            "simulated_coupled(us)": coupled,
            "simulated_e_res(us)": fused - only, "simulated_e_cc(us)": coupled - only,
            "simulated_a2a(us)": a2a, "simulated_speedup_vs_serial": (float(row["fa_us"]) + a2a) / (fused - only
                                                                                                  + float(row["fa_us"]))}


def compare_attention(kernel: pd.DataFrame, platform: Platform) -> pd.DataFrame:
    """Measured per-M attention results beside their simulated replay."""
    summary = measured_summary(kernel)
    rows = []
    for row in summary.to_dict("records"):
        sim = simulate_like(row, platform)
        rows.append({"M": row["M"], "heads": row["heads"], "head_dim": row["head_dim"],
                     "world_size": row["world_size"], "ranks": row.get("ranks", 1),
                     "platform": row.get("platform", platform.name), "simulated_platform": platform.name,
                     "measured_fa_only(us)": row["fa_us"],
                     "measured_serial(us)": row["serial_us"],
                     "measured_fused(us)": row["fused_us"],
                     "simulated_fused(us)": row["fa_us"] + sim["simulated_e_res(us)"],
                     "measured_e_res(us)": row["e_res_us"], "simulated_e_res(us)": sim["simulated_e_res(us)"],
                     "simulated_e_cc(us)": sim["simulated_e_cc(us)"],
                     "measured_hiding_ratio": row["hiding_ratio"],
                     "measured_speedup_vs_serial": row["speedup_vs_serial"],
                     "simulated_speedup_vs_serial": sim["simulated_speedup_vs_serial"],
                     "simulated_a2a(us)": sim["simulated_a2a(us)"], "send": sim["send"]})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    return add_relative_errors(out, QUANTITIES)


def attention_error_summary(frame: pd.DataFrame) -> dict:
    from xstage.compare.metrics import frame_error_summary

    out = frame_error_summary(frame, ["fused(us)", "speedup_vs_serial"])
    out["speedup_sign_agreement"] = sign_agreement(frame["measured_speedup_vs_serial"],
                                                   frame["simulated_speedup_vs_serial"])
    return out


def compare_attention_tiles(tiles: pd.DataFrame, platform: Platform, kernel: pd.DataFrame | None = None,
                            *, latency_us: float | None = None) -> pd.DataFrame:
    """Measured per-tile instrumentation of the fused kernel beside the Q-loop replay, per M.

    The replay takes the measured shape (heads = local heads seen, b_m = M / query blocks, one
    program per distinct program id), the measured median Q-loop time as every tile's mainloop and
    each tile's measured remote bytes; with the stagger send (the tile rows' config label, else the
    "fused" kernel rows) each program's sends go to the stagger's points. Returns per M: measured and
    simulated issue-span median and p90, measured Q-loop median, the number of tiles, and ``send``."""
    rows = []
    sched_names = tiles["schedule"].astype(str)
    # the chosen fused kernel ("fused") when the records hold it: the bench also logs every other fused
    # option (fused_wb, fused_wb_split, ...), whose tiles must not be pooled with it
    fused = tiles[sched_names == "fused"] if (sched_names == "fused").any() else tiles[sched_names.str.startswith("fused")]
    for M, g in fused.groupby("M", sort=True):
        M = int(M)
        heads, m_blocks = int(g["n"].max()) + 1, int(g["m"].max()) + 1
        bm = M // m_blocks
        programs = int(g["program"].nunique()) if "program" in g else platform.sm_count
        bn = 128
        if kernel is not None and len(kernel) and "block_n" in kernel:
            k = fused_rows(kernel, M)
            k = k if len(k) else kernel[kernel["M"] == M]  # the chosen kernel's block_n, not a tuning row's
            bn = int(k["block_n"].iloc[0]) if len(k) else bn
        stagger = bool(g["config"].map(label_staggers).all()) if "config" in g and g["config"].notna().all() \
            else bool(kernel_staggers(kernel, M))
        span = (g["issue_end(us)"] - g["issue_start(us)"]).to_numpy()
        qloop = float(np.median(g["mainloop_end(us)"] - g["mainloop_start(us)"]))
        sched = fa_qloop(heads, M, programs, block_m=bm)
        by_tile = dict(zip(zip(g["n"].astype(int), g["m"].astype(int)), g["bytes_remote"].astype(float)))
        nbytes = np.array([by_tile.get((int(h), int(m)), 0.0)
                           for h, m in zip(sched.column("expert"), sched.column("m_block"))])
        T = len(sched.tiles)
        rc = ReplayConfig(staging_slots=0, cover_us=qloop / math.ceil(M / bn), remote_epilogue_us=0.0,
                          local_epilogue_us=0.0, record_occupancy=False, producers=min(programs, T))
        r = replay(sched, replay_mainloops(sched, qloop, M // bn, stagger), nbytes, platform, rc)
        sim_span = (r.arrays["epi_end"] - r.arrays["epi_start"])[nbytes > 0]
        meas_span = span[g["bytes_remote"].to_numpy() > 0]
        rows.append({"M": M, "tiles": int(len(g)), "programs": programs, "send": SENDS[stagger],
                     "measured_qloop_median(us)": qloop,
                     "measured_span_median(us)": float(np.median(meas_span)) if len(meas_span) else np.nan,
                     "simulated_span_median(us)": float(np.median(sim_span)) if len(sim_span) else np.nan,
                     "measured_span_p90(us)": float(np.percentile(meas_span, 90)) if len(meas_span) else np.nan,
                     "simulated_span_p90(us)": float(np.percentile(sim_span, 90)) if len(sim_span) else np.nan,
                     "measured_makespan(us)": float(g["issue_end(us)"].max()),
                     "simulated_makespan(us)": float(r.makespan_us)})
    out = pd.DataFrame(rows)
    return add_relative_errors(out, ["span_median(us)", "makespan(us)"]) if len(out) else out


FA4_EXPERIMENT = "attention-fa4"


def _fa4_tile(variant: str) -> tuple:
    """(block_m, block_n) of an FA4 variant: ``..._t<m>x<n>`` names FA4's tile_mn, else its default 128x128."""
    tag = variant.rsplit("_t", 1)[-1] if "_t" in variant else ""
    m, _, n = tag.partition("x")
    return (int(m), int(n)) if m.isdigit() and n.isdigit() else (128, 128)


def fa4_summary(kernel: pd.DataFrame) -> pd.DataFrame:
    """Per FA4 run (``record_file``) and M: the summary rows of ``xstage results attention`` (fa_core "fa4"),
    with ``E_res/T_FA`` from the best fused variant's paired residual."""
    from xstage.compare.attention_records import FA4_HEADLINE, fa4_summary_rows

    if "record_file" not in kernel:
        kernel = kernel.assign(record_file="")
    rows = []
    for run, g in kernel.groupby("record_file", sort=True):
        name = Path(str(run)).parent.name or str(run)  # the run's folder (data/attention-fa4/<run>/...)
        rows += fa4_summary_rows(g, run=name, records=str(run), headline=name == FA4_HEADLINE)
    out = pd.DataFrame(rows)
    if len(out):
        out["E_res/T_FA"] = out["e_res_paired_us"] / out["fa_us"]
    return out


def compare_fa4(kernel: pd.DataFrame, platform: Platform) -> pd.DataFrame:
    """Per FA4 run (``record_file``), M and measured fused variant: measured time, E_res (median and
    paired) and paired H beside the tile-end Q-loop replay with the measured FA4 time as input."""
    from xstage.compare.attention_records import fa4_results

    kernel = fa4_results(kernel)
    if "record_file" not in kernel:
        kernel = kernel.assign(record_file="")
    rows, cache = [], {}
    for (run, M), g in kernel.groupby(["record_file", "M"], sort=True):
        g = g.drop_duplicates("variant", keep="last").set_index("variant")
        t = g["time(us)"]
        paired = g["paired_minus_fa(us)"] if "paired_minus_fa(us)" in g else pd.Series(dtype=float)
        transfer = paired.get("serial_fa4", np.nan)
        first = g.iloc[0]
        for variant in sorted(v for v in t.index if v.startswith("fused") and v != "fused_hbm"):
            bm, bn = _fa4_tile(variant)
            fa_name = "fa4" if (bm, bn) == (128, 128) else f"fa4_t{bm}x{bn}"
            if fa_name not in t:
                continue
            fa = float(t[fa_name])
            all_remote = variant.startswith(("fused_allhost", "fused_cm"))
            key = (int(M), bm, bn, fa, all_remote)
            if key not in cache:
                cache[key] = simulate_like({"M": M, "heads": first["heads"], "head_dim": first["head_dim"],
                                            "world_size": first["world_size"], "rank": first.get("rank", 0),
                                            "block_m": bm, "block_n": bn, "fa_us": fa}, platform,
                                           all_remote=all_remote)
            sim = cache[key]
            res_paired = float(paired.get(variant, np.nan))
            serial = float(t.get("serial_fa4", np.nan))
            rows.append({"record_file": run, "M": int(M), "variant": variant, "heads": int(first["heads"]),
                         "head_dim": int(first["head_dim"]), "world_size": int(first["world_size"]),
                         "platform": str(first["platform"]), "simulated_platform": platform.name,
                         "send": SENDS[False], "own_chunk_remote": all_remote, "block_n": bn,
                         "measured_fa_only(us)": fa, "measured_fused(us)": float(t[variant]),
                         "simulated_fused(us)": fa + sim["simulated_e_res(us)"],
                         "measured_e_res(us)": float(t[variant]) - fa, "measured_e_res_paired(us)": res_paired,
                         "simulated_e_res(us)": sim["simulated_e_res(us)"],
                         "simulated_e_cc(us)": sim["simulated_e_cc(us)"],
                         "measured_hiding_ratio_paired": 1.0 - res_paired / transfer if transfer else np.nan,
                         "simulated_hiding_ratio": 1.0 - sim["simulated_e_res(us)"] / sim["simulated_a2a(us)"],
                         "measured_speedup_vs_serial": serial / float(t[variant]),
                         "simulated_speedup_vs_serial": sim["simulated_speedup_vs_serial"],
                         "simulated_a2a(us)": sim["simulated_a2a(us)"]})
    out = pd.DataFrame(rows)
    return add_relative_errors(out, QUANTITIES) if len(out) else out
