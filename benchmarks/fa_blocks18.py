"""Post hoc (session 18): does the block effect of fused - FA-only follow the GPU's clock, power, temperature or clock
event reasons? Committed records only, no device call; nothing here scores or refits a rule
(``docs/calibration/attention-blocks18.md``).

Runs of ``benchmarks/gpu/fa_rule20.py`` (``rule20-pairs.parquet``, ``rule20-blocks.parquet``) with an nvidia-smi
trace beside them (``smi-trace.csv``, one sample every 50 ms: SM clock, power, temperature, clock event reasons):

    0f9b681-rule21  rule 21's call: 10 points, 16 ``keep`` blocks and 8 ``hbm`` control blocks (split_hbm, no host
                    stores) per point, 48 pairs per block, 8 warm pairs queued in the stream, seeded random pair order
    71a2b52-rule20  rule 20's call: 3 points, 8 blocks each of ``keep``, ``recapture``, ``fresh``, alternating order

The alignment (``pair_times``). A block row carries ``host_start(s)`` / ``host_end(s)``: the host's ``time.time()``
before its pairs were queued and after ``sync`` returned (``timing.paired_differences``' ``marks``). The pairs are
CUDA-graph launches queued back to back, so the last pair ends at ``host_end(s)`` (the sync's return latency, tens
of us, neglected) and each earlier pair ends where the next starts: pair i ends at host_end minus the durations
(``fa(us)`` + ``other(us)``) of the pairs after it. Each launch's mid time follows from the pair order
(``base_first``). The trace's timestamps are the same host's wall clock. ``lag_scan`` checks the alignment on
the FA-only launches, whose time follows the SM clock: Pearson's r of each launch's log time (less its point's
median) against the log SM clock interpolated at the launch's mid time + lag, over lags of -0.5 .. +0.5 s; the
alignment holds where r has a clear extreme near lag 0. The best lag is used for everything after.

Per block (``block_trace``): the trace samples inside the timed pairs' interval (shifted by the lag): their count,
SM clock mean / min / max, power mean, temperature mean, and the share with each clock event reason bit set
(``REASONS``); the block's E_blk (median of fused - FA-only), SE_blk (1.2533 x MAD-scaled SD / sqrt(n), as rule 20),
T_blk (FA-only median), and E_cyc: the median of the pair differences with each launch put into cycles at the
clock interpolated at its own mid time (time x MHz / ``REF_MHZ``), the difference that would remain if the two
launches of a pair had run at one clock.

Per point and arm (``point_arm``): F = var(E_blk) / mean(SE_blk^2) (rule 20's ratio) and F of E_cyc; Spearman's
rho of E_blk and T_blk against the block's clock, power, temperature and power-cap share; the least-squares slope
of E_blk on the block clock (us per MHz, with its SE and R^2); the spread a pure 1/f scaling of E would give
(|E| x SD(clock) / mean clock). ``pooled``: rule 20's pooled test (standardised residuals against each quantity's
deviation from its point median, Spearman, all blocks of an arm). ``pair_level``: inside blocks, each pair's
difference and FA-only time (less the block median) against the clock at the pair (less the block mean).
``misses``: rule 21's three missed points set against what the block effect and the clock could move E by.
``controls``: the two committed points measured by rules 19, 20 and 21 (E against the call's clock).

    python benchmarks/fa_blocks18.py [--json data/attention-extra/fa-blocks18-posthoc.json]
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fa_rule20 as R20  # noqa: E402
from calib_knee10 import refuse_existing, write_new  # noqa: E402

from xstage.errors import exit_with  # noqa: E402
from xstage.paths import data_dir  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

RUNS = ("attention-runs/0f9b681-rule21", "attention-runs/71a2b52-rule20")
RULE21_SCORED = "attention-extra/fa-rule21-scored-h200-pcie-host.json"
RULE19_JUDGED = "predictions/fa-rule19-judged-h200-pcie-host.json"
RULE19_META = "attention-runs/a6c27c3-rule19/rule19-meta.json"
BLOCK = R20.KEYS + ["arm", "round"]
REF_MHZ = 1980.0                              # the H200's top SM clock in these traces
LAGS = np.round(np.arange(-0.5, 0.5001, 0.005), 3)
REASONS = {"idle": 0x1, "power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40,
           "power_brake": 0x80}
MISSES = ("54272:4 d128 bn128", "52224:4 d128 bn64", "54272:6 d64 bn128")
CONTROLS = ("45056:4 d128 bn128", "36864:6 d64 bn128")


def smi_trace(path: Path) -> pd.DataFrame:
    """``fa_rule20.smi_frame`` (epoch ``t``, ``sm(MHz)``, ``power(W)``, ``temp(C)``) with the reasons as an int."""
    s = R20.smi_frame(path)
    return s.assign(reasons=[int(str(x).strip(), 16) for x in s["reasons"]]).sort_values("t").reset_index(drop=True)


def pair_times(pairs: pd.DataFrame, blocks: pd.DataFrame) -> pd.DataFrame:
    """Pairs with ``start(s)``, ``end(s)`` and the two launches' mid times ``t_fa(s)``, ``t_other(s)``, counted back
    from the block's ``host_end(s)`` (module doc: the pairs run back to back, the last ends at host_end)."""
    p = pairs.merge(blocks[BLOCK + ["host_start(s)", "host_end(s)"]], on=BLOCK, how="inner")
    p = p.sort_values(BLOCK + ["pair"]).reset_index(drop=True)
    fa, other = p["fa(us)"].to_numpy(float) / 1e6, p["other(us)"].to_numpy(float) / 1e6
    p["dur"] = fa + other
    later = p.groupby(BLOCK, sort=False)["dur"].transform(lambda x: x[::-1].cumsum()[::-1] - x)
    p["end(s)"] = p["host_end(s)"] - later
    p["start(s)"] = p["end(s)"] - p["dur"]
    bf = p["base_first"].astype(bool).to_numpy()
    p["t_fa(s)"] = p["start(s)"] + np.where(bf, fa / 2, other + fa / 2)
    p["t_other(s)"] = p["start(s)"] + np.where(bf, fa + other / 2, other / 2)
    p["point"] = [R20.label(r) for r in p[R20.KEYS].to_dict(orient="records")]
    return p.drop(columns="dur")


def clock_at(smi: pd.DataFrame, t, lag: float) -> np.ndarray:
    """The SM clock (MHz) linearly interpolated at times ``t`` + ``lag`` (the trace sample at t + lag describes t)."""
    return np.interp(np.asarray(t, float) + lag, smi["t"].to_numpy(float), smi["sm(MHz)"].to_numpy(float))


def lag_scan(p: pd.DataFrame, smi: pd.DataFrame, lags=LAGS) -> pd.DataFrame:
    """Pearson's r of the FA-only launches' log time (less the point's median) against the log clock at their mid
    time + lag, per lag (module doc)."""
    y = np.log(p["fa(us)"].to_numpy(float))
    y = y - p.assign(y=y).groupby("point")["y"].transform("median").to_numpy()
    r = [float(np.corrcoef(y, np.log(clock_at(smi, p["t_fa(s)"], lag)))[0, 1]) for lag in lags]
    return pd.DataFrame({"lag(s)": lags, "r": r})


def se_median(d: np.ndarray) -> float:
    return float(R20.SE_MEDIAN * R20.MAD * np.median(np.abs(d - np.median(d))) / np.sqrt(len(d)))


def block_trace(p: pd.DataFrame, smi: pd.DataFrame, lag: float) -> pd.DataFrame:
    """One row per block: the trace over its timed pairs (samples, clock, power, temperature, reason shares) and its
    E_blk, SE_blk, T_blk, E_cyc, SE_cyc (module doc)."""
    rows = []
    for k, g in p.groupby(BLOCK, sort=False):
        t0, t1 = float(g["start(s)"].min()), float(g["end(s)"].max())
        s = smi[(smi["t"] - lag >= t0) & (smi["t"] - lag <= t1)]
        d = g["diff(us)"].to_numpy(float)
        c_fa, c_other = clock_at(smi, g["t_fa(s)"], lag), clock_at(smi, g["t_other(s)"], lag)
        dc = (g["other(us)"].to_numpy(float) * c_other - g["fa(us)"].to_numpy(float) * c_fa) / REF_MHZ
        row = {**dict(zip(BLOCK, k)), "point": g["point"].iloc[0], "start(s)": t0, "end(s)": t1,
               "samples": int(len(s)), "E_blk": float(np.median(d)), "SE_blk": se_median(d),
               "T_blk": float(g["fa(us)"].median()), "E_cyc": float(np.median(dc)), "SE_cyc": se_median(dc)}
        row.update({"sm(MHz)": float(s["sm(MHz)"].mean()) if len(s) else np.nan,
                    "sm_min(MHz)": float(s["sm(MHz)"].min()) if len(s) else np.nan,
                    "sm_max(MHz)": float(s["sm(MHz)"].max()) if len(s) else np.nan,
                    "power(W)": float(s["power(W)"].mean()) if len(s) else np.nan,
                    "temp(C)": float(s["temp(C)"].mean()) if len(s) else np.nan})
        row.update({f"share_{n}": float(((s["reasons"] & bit) > 0).mean()) if len(s) else np.nan
                    for n, bit in REASONS.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def ols(x, y) -> dict:
    """y = a + b x by least squares: slope b, its SE, R^2 (NaN under 3 points or a constant x)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0:
        return {"slope": float("nan"), "se": float("nan"), "r2": float("nan")}
    b, a = np.polyfit(x, y, 1)
    res = y - (a + b * x)
    sxx = float(((x - x.mean()) ** 2).sum())
    return {"slope": float(b), "se": float(np.sqrt((res ** 2).sum() / (len(x) - 2) / sxx)),
            "r2": float(1 - (res ** 2).sum() / ((y - y.mean()) ** 2).sum())}


TRACE = ("sm(MHz)", "power(W)", "temp(C)", "share_power_cap")


def point_arm(bt: pd.DataFrame) -> list:
    """Per point and arm: F and F of E_cyc, the trace's spread over the blocks, rho of E_blk and T_blk with the trace,
    the slopes of E_blk and T_blk on the clock, the spread a 1/f scaling of E would give (module doc)."""
    out = []
    for (pt, arm), g in bt.groupby(["point", "arm"], sort=False):
        E = float(g["E_blk"].median())
        clk = g["sm(MHz)"]
        out.append({"point": pt, "arm": arm, "blocks": int(len(g)), "E_us": E,
                    "sd_blocks_us": float(g["E_blk"].std(ddof=1)),
                    "se_block_us": float(np.sqrt(np.mean(g["SE_blk"] ** 2))),
                    "F": R20.f_ratio(g["E_blk"], g["SE_blk"]), "F_cyc": R20.f_ratio(g["E_cyc"], g["SE_cyc"]),
                    "E_cyc_us": float(g["E_cyc"].median()), "sd_cyc_blocks_us": float(g["E_cyc"].std(ddof=1)),
                    "se_cyc_block_us": float(np.sqrt(np.mean(g["SE_cyc"] ** 2))), "T_us": float(g["T_blk"].median()),
                    "samples_per_block": [int(g["samples"].min()), int(g["samples"].max())],
                    "sm_mean_MHz": float(clk.mean()), "sm_sd_blocks_MHz": float(clk.std(ddof=1)),
                    "sm_range_MHz": [float(g["sm_min(MHz)"].min()), float(g["sm_max(MHz)"].max())],
                    "power_mean_W": float(g["power(W)"].mean()), "power_sd_blocks_W": float(g["power(W)"].std(ddof=1)),
                    "temp_range_C": [float(g["temp(C)"].min()), float(g["temp(C)"].max())],
                    "power_cap_share": [float(g["share_power_cap"].min()), float(g["share_power_cap"].max())],
                    "other_reasons_share": float(g[[f"share_{n}" for n in REASONS if n not in ("idle", "power_cap")]]
                                                 .to_numpy().max()),
                    "rho_E": {c: R20.spearman(g["E_blk"], g[c]) for c in TRACE},
                    "rho_T": {c: R20.spearman(g["T_blk"], g[c]) for c in TRACE},
                    "E_on_clock": ols(clk, g["E_blk"]), "T_on_clock": ols(clk, g["T_blk"]),
                    "sd_if_E_scaled_1_over_f_us": float(abs(E) * clk.std(ddof=1) / clk.mean())})
    return out


def pooled(bt: pd.DataFrame) -> dict:
    """Per arm: Spearman of the standardised residuals of E_blk (less the point's median, over sqrt(mean SE^2)) and
    of T_blk (over its SD) against each trace quantity's deviation from the point's median; all blocks of the arm."""
    out = {}
    for arm, g in bt.groupby("arm", sort=False):
        grp = g.groupby("point")
        rE = (g["E_blk"] - grp["E_blk"].transform("median")) / np.sqrt(grp["SE_blk"].transform(lambda x: np.mean(x ** 2)))
        rT = (g["T_blk"] - grp["T_blk"].transform("median")) / grp["T_blk"].transform("std")
        dev = {c: g[c] - grp[c].transform("median") for c in TRACE}
        out[arm] = {"blocks": int(len(g)), "E": {c: R20.spearman(rE, v) for c, v in dev.items()},
                    "T": {c: R20.spearman(rT, v) for c, v in dev.items()}}
    return out


def pair_level(p: pd.DataFrame, smi: pd.DataFrame, lag: float) -> list:
    """Per point and arm, inside blocks: Spearman of each pair's difference, and of its FA-only time, less the block
    median, against the clock at the pair (the mean of its two launches' interpolated clocks) less the block mean."""
    q = p.assign(clk=(clock_at(smi, p["t_fa(s)"], lag) + clock_at(smi, p["t_other(s)"], lag)) / 2)
    g = q.groupby(BLOCK, sort=False)
    q = q.assign(d=q["diff(us)"] - g["diff(us)"].transform("median"), fa=q["fa(us)"] - g["fa(us)"].transform("median"),
                 c=q["clk"] - g["clk"].transform("mean"))
    return [{"point": pt, "arm": arm, "pairs": int(len(x)), "rho_diff_clock": R20.spearman(x["d"], x["c"]),
             "rho_fa_clock": R20.spearman(x["fa"], x["c"])} for (pt, arm), x in q.groupby(["point", "arm"], sort=False)]


def analyse_run(folder: Path) -> tuple:
    """(record, block table) of one run: the lag scan and the tables above."""
    pairs, blocks, _ = R20.load_run(folder)
    smi = smi_trace(folder / "smi-trace.csv")
    p = pair_times(pairs, blocks)
    scan = lag_scan(p, smi)
    best = scan.loc[scan["r"].idxmin()]
    lag = float(best["lag(s)"])
    bt = block_trace(p, smi, lag)
    host = (blocks["host_end(s)"] - blocks["host_start(s)"]).to_numpy()
    busy = p.groupby(BLOCK)[["fa(us)", "other(us)"]].sum().sum(axis=1).to_numpy() / 1e6
    seen = sorted({hex(int(x)) for x in smi["reasons"]})
    rec = {"lag_s": lag, "r_at_lag": float(best["r"]), "r_at_0": float(scan.loc[scan["lag(s)"] == 0, "r"].iloc[0]),
           "lag_scan": scan.iloc[::10].round(3).to_dict(orient="records"),
           "timed_share_of_host_interval": [float(np.min(busy / host)), float(np.median(busy / host))],
           "reasons_seen": seen, "blocks": int(len(bt)),
           "point_arm": point_arm(bt), "pooled": pooled(bt), "pair_level": pair_level(p, smi, lag)}
    return rec, bt


def misses(bt: pd.DataFrame, scored: dict) -> list:
    """Rule 21's missed points: the miss against the block effect's share of E's uncertainty (1.2533 sd_blk /
    sqrt(blocks)) and against the clock: the 1/f scaling of E over the call's block-clock range, and the post hoc
    slope of E_blk on the clock times that range."""
    by = {x["point"]: x for x in scored["points"]}
    out = []
    for pt in MISSES:
        g = bt[(bt["point"] == pt) & (bt["arm"] == "keep")]
        E, rule = by[pt]["E"], by[pt]["rule21"]
        rng = float(g["sm(MHz)"].max() - g["sm(MHz)"].min())
        fit = ols(g["sm(MHz)"], g["E_blk"])
        out.append({"point": pt, "E_us": E, "rule21_us": rule, "miss_us": E - rule,
                    "band_us": max(20.0, 0.2 * abs(E)), "sd_blocks_us": float(g["E_blk"].std(ddof=1)),
                    "se_E_from_blocks_us": float(R20.SE_MEDIAN * g["E_blk"].std(ddof=1) / np.sqrt(len(g))),
                    "block_clock_range_MHz": rng, "sm_mean_MHz": float(g["sm(MHz)"].mean()),
                    "shift_if_1_over_f_us": float(abs(E) * rng / g["sm(MHz)"].mean()),
                    "posthoc_slope_us_per_MHz": fit["slope"], "posthoc_slope_se": fit["se"],
                    "shift_by_posthoc_slope_over_range_us": float(abs(fit["slope"]) * rng)})
    return out


def controls(tables: dict, base: Path) -> list:
    """The committed points in rules 19, 20 and 21: E and the SM clock of each call (rule 19: the one nvidia-smi
    reading taken after the point's last block; rules 20 / 21: the mean over the point's fused blocks)."""
    r19 = {R20.label(p): p["E"]["median_us"] for p in json.loads((base / RULE19_JUDGED).read_text())["points"]}
    snap = {R20.label(p): float(p["clocks"].split(",")[0].replace("MHz", ""))
            for p in json.loads((base / RULE19_META).read_text())["points_done"]}
    out = []
    for pt in CONTROLS:
        row = {"point": pt, "rule19": {"E_us": r19.get(pt), "sm_MHz_after_point": snap.get(pt)}}
        for run, bt in tables.items():
            g = bt[(bt["point"] == pt) & (bt["arm"] != "hbm")]
            row[run.split("-", 1)[1]] = {"E_us": float(g["E_blk"].median()), "sm_mean_MHz": float(g["sm(MHz)"].mean()),
                                         "T_us": float(g["T_blk"].median()), "blocks": int(len(g))}
        out.append(row)
    return out


def study(base: Path, runs=RUNS) -> dict:
    recs, tables = {}, {}
    for run in runs:
        recs[run], tables[run.split("/")[-1]] = analyse_run(base / run)
    scored = json.loads((base / RULE21_SCORED).read_text())
    return {"what": "post hoc (session 18): the block effect of fused - FA-only against the nvidia-smi trace of "
                    "clock, power, temperature and clock event reasons, per block; committed records only",
            "post_hoc": True, "runs": recs,
            "misses": misses(tables["0f9b681-rule21"], scored), "controls": controls(tables, base),
            "not_aligned": {"attention-runs/a6c27c3-rule19": "its graph blocks A / B carry no host timestamps "
                                                             "(rule19-pairs.parquet) and there are two per point"},
            "provenance": provenance()}


def report(rec: dict) -> None:
    for run, r in rec["runs"].items():
        print(f"{run}: lag {r['lag_s']:+.3f} s (r {r['r_at_lag']:.2f}; r at 0 {r['r_at_0']:.2f}); reasons seen "
              f"{r['reasons_seen']}; {r['blocks']} blocks")
        print(f"  {'point':20s} {'arm':9s} {'E':>5s} {'sd':>5s} {'F':>5s} {'F_cyc':>5s} {'clk':>6s} {'sd':>4s} "
              f"{'pw':>4s} {'cap':>9s}  rho_E(clk pw temp cap)   rho_T(clk)  slope E/clk (us/MHz)  1/f sd")
        for x in r["point_arm"]:
            e, t, s = x["rho_E"], x["rho_T"], x["E_on_clock"]
            print(f"  {x['point']:20s} {x['arm']:9s} {x['E_us']:5.0f} {x['sd_blocks_us']:5.1f} {x['F']:5.2f} "
                  f"{x['F_cyc']:5.2f} {x['sm_mean_MHz']:6.0f} {x['sm_sd_blocks_MHz']:4.1f} {x['power_mean_W']:4.0f} "
                  f"{x['power_cap_share'][0]:.2f}-{x['power_cap_share'][1]:.2f}  "
                  + " ".join(f"{e[c]:+.2f}" for c in TRACE) + f"   {t['sm(MHz)']:+.2f}      "
                  f"{s['slope']:+.2f} +- {s['se']:.2f} (R2 {s['r2']:.2f})  {x['sd_if_E_scaled_1_over_f_us']:.1f}")
        for arm, x in r["pooled"].items():
            print(f"  pooled {arm} ({x['blocks']} blocks): E " + ", ".join(f"{c} {v:+.2f}" for c, v in x["E"].items())
                  + "; T " + ", ".join(f"{c} {v:+.2f}" for c, v in x["T"].items()))
        print("  pair level rho(diff, clock) / rho(fa, clock): " + "; ".join(
            f"{x['point'].split()[0]} {x['arm'][:4]} {x['rho_diff_clock']:+.2f}/{x['rho_fa_clock']:+.2f}"
            for x in r["pair_level"]))
    for x in rec["misses"]:
        print(f"miss {x['point']}: E {x['E_us']:.0f} rule {x['rule21_us']:.0f} (miss {x['miss_us']:+.0f}, band "
              f"{x['band_us']:.0f}); se of E from the blocks {x['se_E_from_blocks_us']:.1f}; block clocks over "
              f"{x['block_clock_range_MHz']:.0f} MHz: 1/f shift {x['shift_if_1_over_f_us']:.1f}, post hoc slope "
              f"{x['posthoc_slope_us_per_MHz']:+.2f} +- {x['posthoc_slope_se']:.2f} us/MHz -> "
              f"{x['shift_by_posthoc_slope_over_range_us']:.1f}")
    for x in rec["controls"]:
        print(f"control {x['point']}: " + "; ".join(f"{k} " + ", ".join(f"{kk} {vv}" if not isinstance(vv, float)
                                                                       else f"{kk} {vv:.0f}" for kk, vv in v.items())
                                                   for k, v in x.items() if isinstance(v, dict)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None,
                    help="write the record here (e.g. data/attention-extra/fa-blocks18-posthoc.json); never over an "
                         "existing file")
    args = ap.parse_args(argv)
    if args.json is not None:
        refuse_existing(args.json, "fa_blocks18")
    rec = study(data_dir())
    report(rec)
    if args.json is not None:
        write_new(args.json, rec, "fa_blocks18")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_blocks18")
