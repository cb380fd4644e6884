"""Rule 20: what moves the fused launch's time between blocks, scored as pre-registered (issue 15 item 5;
``docs/calibration/attention-rule20.md``; pre-registration ``data/attention-extra/rule20-preregistration.md``).

The device call (``benchmarks/gpu/fa_rule20.py``) ran, per point, 8 rounds of short blocks in three arms: ``keep``
(graphs and destination buffer fixed), ``recapture`` (fresh graphs per block), ``fresh`` (a new buffer per block).
Per block (``block_table``):

    E_blk   median of the block's paired differences fused - FA-only (us)
    E_bal   mean of its two per-order medians (FA-only first / fused first)
    gap     the per-order medians' difference (FA-only first - fused first)
    SE_blk  1.2533 x the MAD-scaled SD of the differences / sqrt(n): the block median's pair noise

Per arm and point (``arm_point``): F = var(E_blk over the rounds) / mean(SE_blk^2), the block effect beyond pair
noise (about chi2_7 / 7 without one: F > 2.0 is a block effect); F_bal and F_gap the same for E_bal and the gap; the
instrument's self-agreement: the median of block medians of the even rounds against the odd ones, and of the first
half against the second, each within of the other (max(20 us, 20 %)). Beside (``correlates``): standardised residuals
against the copy-engine probe, the nvidia-smi trace over each block (SM clock, power, temperature), the round (share
of variance, 2000 shuffles of the rounds within arm x point) and, in ``fresh``, the buffer's share of pages in 2 MiB
physical runs. ``verdicts`` applies the pre-registered rules.

    python benchmarks/fa_rule20.py [--run attention-runs/71a2b52-rule20] \\
        [--out data/attention-extra/fa-rule20-scored-h200-pcie-host.json]
"""

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.errors import InputError, exit_with
from xstage.paths import data_dir
from xstage.records import atomic_write_text, load_records
from xstage.sim.predict_link import within

RUN = "attention-runs/71a2b52-rule20"
OUT = "attention-extra/fa-rule20-scored-h200-pcie-host.json"
KEYS = ["M", "heads", "head_dim", "block_n"]
ARMS = ("keep", "recapture", "fresh")
F_LIMIT = 2.0                 # ~ the 95th percentile of chi2_7 / 7 (8 blocks)
RHO_LIMIT = {"probe": 0.5, "clock": 0.5, "pages": 0.6}
SHUFFLES = 2000
MAD = 1.4826
SE_MEDIAN = 1.2533            # sqrt(pi / 2): the median's standard error over the mean's


def label(row) -> str:
    return f"{int(row['M'])}:{int(row['heads'])} d{int(row['head_dim'])} bn{int(row['block_n'])}"


def agrees(a: float, b: float) -> bool:
    """Each of two measurements within max(20 us, 20 %) of the other."""
    return bool(within(a, b) and within(b, a))


def spearman(x, y) -> float:
    """Spearman's rank correlation of two equally long sequences (NaN pairs dropped); NaN under 4 pairs."""
    f = pd.DataFrame({"x": x, "y": y}).dropna()
    if len(f) < 4 or f["x"].nunique() < 2 or f["y"].nunique() < 2:
        return float("nan")
    return float(np.corrcoef(f["x"].rank(), f["y"].rank())[0, 1])


def smi_frame(path: Path) -> pd.DataFrame:
    """nvidia-smi's 50 ms trace: epoch seconds ``t``, ``sm(MHz)``, ``power(W)``, ``temp(C)``, ``reasons``."""
    s = pd.read_csv(path, skipinitialspace=True)
    s.columns = ["ts", "sm", "pw", "temp", "reasons"]
    t = pd.to_datetime(s["ts"], format="%Y/%m/%d %H:%M:%S.%f")
    return pd.DataFrame({"t": (t - pd.Timestamp("1970-01-01")) / pd.Timedelta(seconds=1),
                         "sm(MHz)": s["sm"].str.replace(" MHz", "").astype(float),
                         "power(W)": s["pw"].str.replace(" W", "").astype(float),
                         "temp(C)": s["temp"].astype(float), "reasons": s["reasons"]})


def block_table(pairs: pd.DataFrame, blocks: pd.DataFrame, smi: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per block: E_blk, E_bal, gap, SE_blk, the FA-only and fused medians, the probe, the trace (module
    doc)."""
    rows = []
    for k, g in pairs.groupby(KEYS + ["arm", "round"], sort=False):
        d = g["diff(us)"].to_numpy(float)
        bf = g[g["base_first"].astype(bool)]["diff(us)"].median()
        of = g[~g["base_first"].astype(bool)]["diff(us)"].median()
        s = MAD * float(np.median(np.abs(d - np.median(d))))
        rows.append({**dict(zip(KEYS + ["arm", "round"], k)), "n": len(d), "E_blk": float(np.median(d)),
                     "E_bal": float((bf + of) / 2), "gap": float(bf - of), "sd_pair": s,
                     "SE_blk": SE_MEDIAN * s / np.sqrt(len(d)), "SE_gap": 2 * SE_MEDIAN * s / np.sqrt(len(d)),
                     "fa_us": float(g["fa(us)"].median()), "fused_us": float(g["other(us)"].median())})
    bt = pd.DataFrame(rows)
    cols = KEYS + ["arm", "round", "slot", "host_start(s)", "host_end(s)", "probe_median(us)", "share_in_2M_runs",
                   "page_runs"]
    bt = bt.merge(blocks[cols], on=KEYS + ["arm", "round"], how="left")
    if smi is not None:
        for c in ("sm(MHz)", "power(W)", "temp(C)"):
            bt[c] = [float(smi[(smi["t"] >= a) & (smi["t"] <= b)][c].median())
                     for a, b in zip(bt["host_start(s)"], bt["host_end(s)"])]
    bt["point"] = bt.apply(label, axis=1)
    grp = bt.groupby(["point", "arm"])
    bt["resid"] = (bt["E_blk"] - grp["E_blk"].transform("median")) / np.sqrt(grp["SE_blk"].transform(
        lambda x: np.mean(x ** 2)))
    return bt


def f_ratio(values, se) -> float:
    """var(values) / mean(se^2): 1 when the values spread only by their own noise."""
    return float(np.var(np.asarray(values, float), ddof=1) / np.mean(np.asarray(se, float) ** 2))


def split_agreement(g: pd.DataFrame, col: str) -> dict:
    """Median of block medians of even against odd rounds, and first half against second; each within of the other."""
    r = g.sort_values("round")
    half = len(r) // 2
    even, odd = r[r["round"] % 2 == 0][col].median(), r[r["round"] % 2 == 1][col].median()
    early, late = r.iloc[:half][col].median(), r.iloc[half:][col].median()
    return {"even_us": float(even), "odd_us": float(odd), "even_odd": agrees(even, odd),
            "early_us": float(early), "late_us": float(late), "early_late": agrees(early, late),
            "both": agrees(even, odd) and agrees(early, late)}


def arm_point(bt: pd.DataFrame) -> list:
    """Per point and arm: E (median of block medians), F, F_bal, F_gap, the spread, both splits for E_blk and E_bal."""
    out = []
    for (pt, arm), g in bt.groupby(["point", "arm"], sort=False):
        out.append({"point": pt, "arm": arm, "blocks": int(len(g)), "E_us": float(g["E_blk"].median()),
                    "E_bal_us": float(g["E_bal"].median()), "E_blocks_us": [round(x, 1) for x in g["E_blk"]],
                    "sd_blocks_us": float(g["E_blk"].std(ddof=1)),
                    "se_block_us": float(np.sqrt(np.mean(g["SE_blk"] ** 2))),
                    "F": f_ratio(g["E_blk"], g["SE_blk"]), "F_bal": f_ratio(g["E_bal"], g["SE_blk"]),
                    "F_gap": f_ratio(g["gap"], g["SE_gap"]), "gap_us": float(g["gap"].median()),
                    "F_fa": f_ratio(g["fa_us"], g["SE_blk"]), "F_fused": f_ratio(g["fused_us"], g["SE_blk"]),
                    "agree": split_agreement(g, "E_blk"), "agree_bal": split_agreement(g, "E_bal")})
    return out


def round_share(bt: pd.DataFrame, shuffles: int = SHUFFLES, seed: int = 20) -> dict:
    """Share of the residuals' variance explained by the round, and its permutation p (rounds shuffled within each
    arm x point)."""
    def r2(rounds):
        m = bt["resid"].groupby(rounds).transform("mean")
        return float(((m - bt["resid"].mean()) ** 2).sum() / ((bt["resid"] - bt["resid"].mean()) ** 2).sum())

    obs = r2(bt["round"].to_numpy())
    rng = np.random.default_rng(seed)
    groups = [idx.to_numpy() for _, idx in bt.groupby(["point", "arm"]).groups.items()]
    rounds = bt["round"].to_numpy()
    hits = 0
    for _ in range(shuffles):
        shuffled = rounds.copy()
        for idx in groups:
            shuffled[idx] = rng.permutation(rounds[idx])
        hits += r2(shuffled) >= obs
    return {"share": obs, "p": (hits + 1) / (shuffles + 1), "shuffles": shuffles}


def correlates(bt: pd.DataFrame) -> dict:
    """Spearman correlations of the residuals with the probe and the trace; in ``fresh``, of E_blk with the page runs
    per point; the round's share."""
    probe_res = bt["probe_median(us)"] - bt.groupby("point")["probe_median(us)"].transform("median")
    out = {"probe": spearman(bt["resid"], probe_res)}
    for c in ("sm(MHz)", "power(W)", "temp(C)"):
        if c in bt:
            out[c] = spearman(bt["resid"], bt[c] - bt.groupby("point")[c].transform("median"))
    fr = bt[bt["arm"] == "fresh"]
    out["pages_fresh"] = {pt: spearman(g["E_blk"], g["share_in_2M_runs"]) for pt, g in fr.groupby("point")}
    out["round"] = round_share(bt)
    return out


def verdicts(ap: list, cor: dict) -> dict:
    """The pre-registered rules (``rule20-preregistration.md``) on the figures."""
    by = {(x["point"], x["arm"]): x for x in ap}
    pts = sorted({x["point"] for x in ap})
    F = {arm: {pt: by[(pt, arm)]["F"] for pt in pts} for arm in ARMS}
    keep_effect = [pt for pt in pts if F["keep"][pt] > F_LIMIT]
    h1 = sum(F["recapture"][pt] > F_LIMIT and F["keep"][pt] <= F_LIMIT for pt in pts) >= 2
    pages = [abs(v) >= RHO_LIMIT["pages"] for v in cor["pages_fresh"].values() if np.isfinite(v)]
    h2 = sum(F["fresh"][pt] > F_LIMIT and F["keep"][pt] <= F_LIMIT for pt in pts) >= 2 or sum(pages) >= 2
    h3 = len(keep_effect) >= 2 and (cor["probe"] >= RHO_LIMIT["probe"] or cor["round"]["p"] < 0.05)
    h4 = any(abs(cor.get(c, float("nan"))) >= RHO_LIMIT["clock"] for c in ("sm(MHz)", "power(W)", "temp(C)"))
    h5 = (sum(by[(pt, "keep")]["F_bal"] < by[(pt, "keep")]["F"] for pt in pts) >= 2
          and sum(by[(pt, "keep")]["F_gap"] > F_LIMIT for pt in pts) >= 2)
    any_effect = [arm for arm in ARMS if sum(F[arm][pt] > F_LIMIT for pt in pts) >= 2]
    inst = {arm: {"E_blk": sum(by[(pt, arm)]["agree"]["both"] for pt in pts),
                  "E_bal": sum(by[(pt, arm)]["agree_bal"]["both"] for pt in pts)} for arm in ARMS}
    return {"H1_graph_instance": h1, "H2_pages": h2, "H3_host_link_in_time": h3, "H4_clocks": h4, "H5_order": h5,
            "block_effect_in_keep_at": keep_effect, "arms_with_block_effect_at_2_points": any_effect,
            "instrument_agrees_both_splits": inst, "points": len(pts),
            "keep_meets_criterion": inst["keep"]["E_blk"] == len(pts)}


# ---------------------------------------------------------------- read after the scoring (judges nothing)

def blocks_needed(sd_blk_us: float, E_us: float, z: float = 1.645) -> int:
    """Blocks per group so that two groups' medians of block medians fall within the band of each other 9 times in
    10, when block medians spread by ``sd_blk_us`` (each group's median has SD 1.2533 sd / sqrt(k))."""
    band = max(20.0, 0.2 * abs(E_us))
    return max(1, int(np.ceil(2 * (z * SE_MEDIAN * sd_blk_us / band) ** 2)))


def pooled_points(bt: pd.DataFrame) -> list:
    """Per point, the three arms' blocks pooled (they do not differ: no H1, no H2): E, the spread of block medians,
    both splits (alternate blocks in time order; first half against second), the blocks a group needs."""
    out = []
    for pt, g in bt.sort_values("host_start(s)").groupby("point", sort=False):
        g = g.reset_index(drop=True)
        alt = g.assign(round=np.arange(len(g)))             # time order as the "round": even / odd alternate
        sd = float(g["E_blk"].std(ddof=1))
        out.append({"point": pt, "blocks": int(len(g)), "E_us": float(g["E_blk"].median()),
                    "E_mean_us": float(g["E_blk"].mean()), "sd_blocks_us": sd,
                    "se_E_us": float(SE_MEDIAN * sd / np.sqrt(len(g))),
                    "F": f_ratio(g["E_blk"], g["SE_blk"]), "agree": split_agreement(alt, "E_blk"),
                    "blocks_per_group_needed": blocks_needed(sd, float(g["E_blk"].median())),
                    "fa_us": float(g["fa_us"].median()), "fused_us": float(g["fused_us"].median())})
    return out


def rule19_points(base: Path) -> dict:
    """{point: rule 19's E, E_A, E_B, FA-only and fused medians} from its judged record (another call, another GPU)."""
    rec = json.loads((base / "predictions/fa-rule19-judged-h200-pcie-host.json").read_text())
    return {label(p): {"E_us": p["E"]["median_us"], "A_us": p["E"]["A_us"], "B_us": p["E"]["B_us"],
                       "fa_us": p["E"]["fa_us"], "fused_us": p["E"]["other_us"],
                       "gpu_uuid": rec["provenance"].get("gpu", {}).get("gpu_uuid")
                       if isinstance(rec.get("provenance"), dict) else None} for p in rec["points"]}


def drift_corrected(g: pd.DataFrame) -> tuple:
    """(median, SE) over one block's fused launches of fused - FA-only interpolated at the fused launch's place in
    the launch sequence (fa fused | fused fa | ...): linear clock drift between neighbouring launches cancels."""
    kinds, times = [], []
    for bf, fa, fu in g.sort_values("pair")[["base_first", "fa(us)", "other(us)"]].itertuples(index=False):
        kinds += ["fa", "fused"] if bf else ["fused", "fa"]
        times += [fa, fu] if bf else [fu, fa]
    pos = np.arange(len(kinds))
    is_fa = np.array(kinds) == "fa"
    t = np.asarray(times, float)
    inner = ~is_fa & (pos > pos[is_fa].min()) & (pos < pos[is_fa].max())
    d = t[inner] - np.interp(pos[inner], pos[is_fa], t[is_fa])
    return float(np.median(d)), SE_MEDIAN * MAD * float(np.median(np.abs(d - np.median(d)))) / np.sqrt(len(d))


def drift_corrected_F(pairs: pd.DataFrame) -> list:
    """Per point and arm: F of the block medians as measured and of the drift-corrected ones (``drift_corrected``)."""
    rows = []
    for k, g in pairs.groupby(KEYS + ["arm", "round"], sort=False):
        d = g["diff(us)"].to_numpy(float)
        e, se = drift_corrected(g)
        rows.append({"point": label(dict(zip(KEYS, k))), "arm": k[4], "E": float(np.median(d)), "E_int": e,
                     "SE": SE_MEDIAN * MAD * float(np.median(np.abs(d - np.median(d)))) / np.sqrt(len(d)),
                     "SE_int": se})
    f = pd.DataFrame(rows)
    return [{"point": pt, "arm": arm, "F": f_ratio(x["E"], x["SE"]), "F_int": f_ratio(x["E_int"], x["SE_int"]),
             "E_us": float(x["E"].median()), "E_int_us": float(x["E_int"].median())}
            for (pt, arm), x in f.groupby(["point", "arm"], sort=False)]


def transients(pairs: pd.DataFrame) -> list:
    """Per point, medians over its blocks of the FA-only launches' clock trace: the first three pairs' mean and the
    largest launch, each against the block's median (us), and the pair of the largest."""
    rows = []
    for k, g in pairs.groupby(KEYS + ["arm", "round"], sort=False):
        fa = g.sort_values("pair")["fa(us)"].to_numpy(float)
        rows.append({"point": label(dict(zip(KEYS, k))), "first3_us": float(fa[:3].mean() - np.median(fa)),
                     "max_us": float(fa.max() - np.median(fa)), "max_pair": int(np.argmax(fa))})
    f = pd.DataFrame(rows)
    return [{"point": pt, "first3_us": float(x["first3_us"].median()), "max_us": float(x["max_us"].median()),
             "max_us_top": float(x["max_us"].max()), "max_pair": float(x["max_pair"].median())}
            for pt, x in f.groupby("point", sort=False)]


def rule19_block_shift(base: Path, run: str = "attention-runs/a6c27c3-rule19") -> dict:
    """Rule 19's two graph blocks per point, for the fused build and for the same build into device memory
    (``split_hbm``, no host stores), each against FA-only: z = |E_B - E_A| / sqrt(SE_A^2 + SE_B^2) per point, SE as
    ``block_table``'s. Without a block effect z^2 averages about 1."""
    pairs, _ = load_records(base / run / "rule19-pairs.parquet")
    g = pairs[pairs["protocol"] == "graph"]
    out = {}
    for v, gv in g.groupby("variant"):
        pts = {}
        for k, gk in gv.groupby(KEYS, sort=False):
            med, se, mi, si = {}, {}, {}, {}
            for blk, gb in gk.groupby("block"):
                d = gb["diff(us)"].to_numpy(float)
                med[blk] = float(np.median(d))
                se[blk] = SE_MEDIAN * MAD * float(np.median(np.abs(d - np.median(d)))) / np.sqrt(len(d))
                mi[blk], si[blk] = drift_corrected(gb)
            pts[label(dict(zip(KEYS, k)))] = {"A_us": med["A"], "B_us": med["B"],
                                              "z": abs(med["B"] - med["A"]) / float(np.hypot(se["A"], se["B"])),
                                              "z_int": abs(mi["B"] - mi["A"]) / float(np.hypot(si["A"], si["B"]))}
        z = np.array([x["z"] for x in pts.values()])
        zi = np.array([x["z_int"] for x in pts.values()])
        out[v] = {"points": pts, "mean_z2": float(np.mean(z ** 2)), "median_z": float(np.median(z)),
                  "beyond_2": int((z > 2).sum()), "n": len(z), "mean_z2_int": float(np.mean(zi ** 2))}
    return out


def load_run(folder: Path) -> tuple:
    pairs, _ = load_records(folder / "rule20-pairs.parquet")
    blocks, _ = load_records(folder / "rule20-blocks.parquet")
    smi = smi_frame(folder / "smi-trace.csv") if (folder / "smi-trace.csv").exists() else None
    return pairs, blocks, smi


def judge(run: Path) -> dict:
    pairs, blocks, smi = load_run(run)
    if pairs.empty:
        raise InputError("run", str(run), "has no pairs")
    bt = block_table(pairs, blocks, smi)
    ap = arm_point(bt)
    cor = correlates(bt)
    meta = json.loads((run / "rule20-meta.json").read_text())
    checks = meta["checks"]
    pooled = pooled_points(bt)
    r19 = rule19_points(data_dir())
    for x in pooled:
        y = r19.get(x["point"])
        x["rule19"] = y
        x["agrees_rule19"] = None if y is None else agrees(x["E_us"], y["E_us"])
    return {"run": str(run.relative_to(data_dir())) if run.is_relative_to(data_dir()) else str(run),
            "rounds": int(meta["rounds_done"]),
            "checks": {"rows": len(checks), "ok": sum(bool(c["ok"]) for c in checks)},
            "numa": meta.get("numa"), "arm_point": ap, "correlates": cor, "verdicts": verdicts(ap, cor),
            "posthoc": {"pooled_arms": pooled, "gpu_uuid": meta["provenance"].get("gpu", {}).get("gpu_uuid"),
                        "rule19_block_shift": rule19_block_shift(data_dir()),
                        "drift_corrected": drift_corrected_F(pairs), "transients": transients(pairs)},
            "blocks": bt.drop(columns=["host_start(s)", "host_end(s)"]).round(3).to_dict(orient="records"),
            "provenance": meta["provenance"]}


def print_report(rec: dict) -> None:
    print(f"run {rec['run']}: {rec['rounds']} rounds; checks {rec['checks']['ok']}/{rec['checks']['rows']}")
    print(f"{'point':20s} {'arm':9s} {'E':>6s} {'E_bal':>6s} {'sd_blk':>6s} {'se':>5s} {'F':>6s} {'F_bal':>6s} "
          f"{'F_gap':>6s} {'gap':>5s} {'F_fa':>6s} {'F_fus':>6s}  even/odd  early/late  (E_bal)")
    for x in rec["arm_point"]:
        a, b = x["agree"], x["agree_bal"]
        print(f"{x['point']:20s} {x['arm']:9s} {x['E_us']:6.0f} {x['E_bal_us']:6.0f} {x['sd_blocks_us']:6.1f} "
              f"{x['se_block_us']:5.1f} {x['F']:6.2f} {x['F_bal']:6.2f} {x['F_gap']:6.2f} {x['gap_us']:5.0f} "
              f"{x['F_fa']:6.1f} {x['F_fused']:6.1f}  {a['even_us']:.0f}/{a['odd_us']:.0f} "
              f"{'y' if a['even_odd'] else 'n'}"
              f"  {a['early_us']:.0f}/{a['late_us']:.0f} {'y' if a['early_late'] else 'n'}  "
              f"({'y' if b['even_odd'] else 'n'}{'y' if b['early_late'] else 'n'})")
        print(f"{'':31s}blocks {x['E_blocks_us']}")
    c = rec["correlates"]
    print("correlates (Spearman of residuals): " + ", ".join(f"{k} {v:.2f}" for k, v in c.items()
                                                         if isinstance(v, float)))
    pages = {k: round(v, 2) for k, v in c["pages_fresh"].items()}
    print(f"  fresh E_blk vs share of pages in 2 MiB runs: {json.dumps(pages)}")
    print(f"  round share {c['round']['share']:.3f}, p {c['round']['p']:.3f}")
    print("verdicts: " + json.dumps(rec["verdicts"]))
    print(f"post hoc (judges nothing): the arms pooled; GPU {rec['posthoc']['gpu_uuid']}")
    for x in rec["posthoc"]["pooled_arms"]:
        a, y = x["agree"], x["rule19"] or {}
        print(f"  {x['point']:20s} {x['blocks']} blocks: E {x['E_us']:.0f} (mean {x['E_mean_us']:.0f}, "
              f"se {x['se_E_us']:.0f})"
              f", sd_blk {x['sd_blocks_us']:.1f}, F {x['F']:.2f}; alternate {a['even_us']:.0f}/{a['odd_us']:.0f} "
              f"{'y' if a['even_odd'] else 'n'}, halves {a['early_us']:.0f}/{a['late_us']:.0f} "
              f"{'y' if a['early_late'] else 'n'}; blocks per group needed {x['blocks_per_group_needed']}; "
              f"fa / fused {x['fa_us']:.0f} / {x['fused_us']:.0f}; rule 19 E {y.get('E_us', float('nan')):.0f} "
              f"({y.get('A_us', float('nan')):.0f} / {y.get('B_us', float('nan')):.0f}), fa / fused "
              f"{y.get('fa_us', float('nan')):.0f} / {y.get('fused_us', float('nan')):.0f}: "
              f"{'agrees' if x['agrees_rule19'] else 'does not agree'}")
    for v, x in rec["posthoc"]["rule19_block_shift"].items():
        zs = ", ".join(f"{k} {y['z']:.1f}" for k, y in x["points"].items())
        print(f"  rule 19's blocks A / B, {v} - FA-only: mean z^2 {x['mean_z2']:.2f}, median z {x['median_z']:.2f}, "
              f"{x['beyond_2']} of {x['n']} points beyond 2 SE; drift-corrected mean z^2 {x['mean_z2_int']:.2f} ({zs})")
    dc = "; ".join(f"{x['point'].split()[0]} {x['arm']} {x['F']:.2f} -> {x['F_int']:.2f}"
                   for x in rec["posthoc"]["drift_corrected"])
    print(f"  F, drift-corrected (FA-only interpolated at the fused launch's place): {dc}")
    for x in rec["posthoc"]["transients"]:
        print(f"  {x['point']:20s} FA-only against its block median (medians over blocks): first 3 pairs "
              f"{x['first3_us']:+.0f} us, largest {x['max_us']:+.0f} (top {x['max_us_top']:+.0f}) at pair "
              f"{x['max_pair']:.0f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default=RUN, help="the run's folder under data/")
    ap.add_argument("--out", default=None, help=f"write the record (e.g. data/{OUT})")
    args = ap.parse_args(argv)
    if args.out and Path(args.out).exists():
        raise InputError("out", args.out, "exists; records are not overwritten (give a new path)")
    run = data_dir() / args.run
    if not (run / "rule20-pairs.parquet").exists():
        raise InputError("run", args.run, "has no rule20-pairs.parquet")
    rec = judge(run)
    print_report(rec)
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(rec, indent=1, default=str) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_rule20")
