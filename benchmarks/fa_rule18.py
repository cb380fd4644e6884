"""Rule 18 and the instrument: how well the project's measurements of the split Triton kernel's fused - FA-only
agree with themselves, and whether the build offset (``split_hbm`` - FA-only) can be predicted (issue 15 item 5;
``docs/calibration/attention-rule18.md``; criterion ``data/attention-extra/rule18-criterion.md``).

Quantities per in-pair point (``fa_link_cost.measured_points``; medians over pairs, repeats pooled or per repeat):

    E_ip    in-pair split - FA-only (instrumented direct launches)
    E_std   the standard paired residual of ``fused_wb_split`` (CUDA graphs, uninstrumented; per repeat)
    L       the link cost, split - split_hbm (in-pair: E_ip minus O)
    O       the build offset, split_hbm - FA-only (in-pair)

Every comparison uses the target's band: a is within of b when |a - b| <= max(20 us, 0.2 |b|) (a as the prediction
of b; ordered pairs, so both directions count).

    python benchmarks/fa_rule18.py --instrument [--out data/predictions/fa-rule18-instrument-h200-pcie-host.json]
    python benchmarks/fa_rule18.py --offset [--out data/predictions/fa-rule18-offset-h200-pcie-host.json]
    python benchmarks/fa_rule18.py --judge attention-runs/<run> [--committed] [--out ...]

``--instrument``: single repeats against each other (per quantity; runs with repeats), in-pair against standard,
and the standard residual's run medians across runs. ``--offset``: the criterion's candidates 18a / 18b / 18m,
leave one point out. ``--judge``: a repeat run's instrument figures (disjoint triples of repeats as the scored
pooled medians against each other) and, with ``--committed``, its points against the committed runs' values at the
same points.

What it found (session 13): single repeats agree at 0.62 / 0.62 / 0.68 / 0.73 of ordered pairs (E_ip / E_std / L /
O; 22 committed points); on the repeat run ed474bb-rule18 (four committed points, 7-8 repeats) disjoint triples agree
at 4 / 6 / 6 / 8 of 8, and with the committed values at 0.71 / 0.83 / 0.83 / 1.00. The standard residual sits 135-210
us above the in-pair one at head dim 128 block_n 64, reproducibly. No offset candidate qualifies (18a, 18b: 15 of 22;
18m: 9), though 18a's offset term alone is within of O at 18 of 22.
"""

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fa_link_cost as F  # noqa: E402
import fa_split_inpair_summary as S  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.paths import data_dir  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim.predict_link import within  # noqa: E402

INPAIR_RUNS = ("attention-runs/0dfa499-inpair", "attention-runs/de0efae-rule13", "attention-runs/a86e88c-rule14",
               "attention-runs/24ac5e2-rule17")
RULE17 = ("predictions/fa-rule17-posthoc-h200-pcie-host.json", "predictions/fa-rule17-judged-h200-pcie-host.json")
STANDARD_DIRS = ("attention", "attention-fa4/triton")       # and every folder of attention-runs/ ...
REPEAT_RUN = "attention-runs/ed474bb-rule18"                # ... but the repeat run, which ``--judge`` scores
QUANTITIES = ("E_ip", "E_std", "L", "O")
KEY = F.KEY


def build(p: dict) -> str:
    return f"d{p['head_dim']}-bn{p['block_n']}"


def label(p: dict) -> str:
    return f"{p['run'].split('/')[-1]} {p['M']}:{p['heads']} {build(p)}"


# ---------------------------------------------------------------- measurements

def inpair_reps(folder: Path, name: str) -> list:
    """Per point of an in-pair run: ``measured_points``' pooled figures plus per repeat E_ip, O, L, E_std and the
    FA-only times, and the pooled figures of two interleaved halves of each repeat's pairs ({0,1,4,5} / {2,3,6,7}:
    both launch orders in each)."""
    launch = F._key(load_records(folder / "inpair-launch.parquet", "summary", table="frame")[0])
    kernel = load_records(folder / "attention-kernel.parquet", "kernel")[0]
    kernel = kernel if "rep" in kernel.columns else kernel.assign(rep=0)
    pooled = {tuple(p[k] for k in KEY): p for p in F.measured_points(folder, name)}
    out = []
    for key, la in launch.groupby(KEY):
        if key not in pooled:
            continue
        p = dict(pooled[key])
        ps, ph = S.pair_rows(la), S.pair_rows(la, S.HBM)
        k = kernel[np.logical_and.reduce([kernel[c] == v for c, v in zip(KEY, key)])]
        reps = {}
        for r in sorted(set(ps["rep"]) & set(ph["rep"])):
            e, o = float(ps[ps["rep"] == r]["d_event"].median()), float(ph[ph["rep"] == r]["d_event"].median())
            s = k[(k["rep"] == r) & (k["variant"] == S.SPLIT)]["paired_minus_fa(us)"]
            t = k[(k["rep"] == r) & (k["variant"] == S.FA)]["time(us)"]
            reps[int(r)] = {"E_ip": e, "O": o, "L": e - o, "E_std": float(s.iloc[0]) if len(s) else None,
                            "T_ip": float(ps[ps["rep"] == r]["fa_event_us"].median()),
                            "T_std": float(t.iloc[0]) if len(t) else None}
        halves = []
        for h in ((0, 1, 4, 5), (2, 3, 6, 7)):
            e = float(ps[ps["pair"].isin(h)]["d_event"].median())
            o = float(ph[ph["pair"].isin(h)]["d_event"].median())
            halves.append({"E_ip": e, "O": o, "L": e - o})
        p.update({"reps": reps, "halves": halves, "E_ip": p["d_split_us"], "O": p["d_hbm_us"], "L": p["link_us"],
                  "E_std": p["s_us"], "T_ip": p["fa_event_us"], "T_std": p["fa_std_us"]})
        out.append(p)
    return out


def inpair_points(base: Path, runs=INPAIR_RUNS) -> list:
    return [p for run in runs for p in inpair_reps(base / run, run)]


def standard_rows(base: Path) -> pd.DataFrame:
    """Every ``fused_wb_split`` standard row (stages 3, TMA) of every run folder committed before the repeat run: run,
    the point, rep, E_std, T_std.
    Folders whose rows are a copy of another folder's (same points, same values) are kept once."""
    folders = [base / n for n in STANDARD_DIRS] + sorted(p.parent for p in (base / "attention-runs").glob(
        "*/attention-kernel.parquet") if p.parent != base / REPEAT_RUN)
    frames, seen = [], set()
    for folder in folders:
        k = load_records(folder / "attention-kernel.parquet", "kernel")[0]
        k = k if "rep" in k.columns else k.assign(rep=0)
        k = k[(k["num_stages"] == 3) & k["config"].str.contains(",tma")]
        s = k[k["variant"] == S.SPLIT].set_index(["rep"] + KEY)["paired_minus_fa(us)"].astype(float)
        t = k[k["variant"] == S.FA].drop_duplicates(["rep"] + KEY, keep="last").set_index(["rep"] + KEY)["time(us)"]
        f = pd.DataFrame({"E_std": s, "T_std": t.reindex(s.index).astype(float)}).reset_index()
        sig = tuple(sorted(zip(f["M"], f["heads"], f["rep"], f["E_std"].round(3))))
        if sig in seen or f.empty:
            continue
        seen.add(sig)
        frames.append(f.assign(run=str(folder.relative_to(base))))
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------- agreement

def agreement(groups: list) -> dict:
    """Every ordered pair (a, b) of measurements within a group (a as the prediction of b): pairs within, pairs, the
    share, groups where every ordered pair agrees, groups (only groups of 2 or more measurements count)."""
    groups = [[float(x) for x in g if x is not None and np.isfinite(x)] for g in groups]
    groups = [g for g in groups if len(g) >= 2]
    w = n = ok = 0
    for g in groups:
        hits = [within(a, b) for a, b in itertools.permutations(g, 2)]
        w, n, ok = w + sum(hits), n + len(hits), ok + all(hits)
    return {"pairs_within": int(w), "pairs": int(n), "share": (w / n) if n else None, "groups_all_agree": int(ok),
            "groups": len(groups)}


def cross(a: list, b: list) -> dict:
    """a[i] as the prediction of b[i] and the reverse: points within each way and both ways."""
    ab = [within(x, y) for x, y in zip(a, b)]
    ba = [within(y, x) for x, y in zip(a, b)]
    return {"a_predicts_b": int(sum(ab)), "b_predicts_a": int(sum(ba)),
            "both": int(sum(x and y for x, y in zip(ab, ba))), "n": len(ab)}


def fmt(a: dict) -> str:
    s = "-" if a["share"] is None else f"{a['share']:.2f}"
    return f"{a['pairs_within']}/{a['pairs']} ordered pairs ({s}); {a['groups_all_agree']}/{a['groups']} all agree"


def instrument(args) -> dict:
    base = data_dir()
    pts = inpair_points(base)
    res = {"what": "post hoc: the instrument's agreement with itself for the split Triton kernel (fa_rule18.py "
                   "--instrument); band max(20 us, 0.2 |b|), a as the prediction of b",
           "inpair_runs": list(INPAIR_RUNS)}
    single = {q: agreement([[r[q] for r in p["reps"].values()] for p in pts]) for q in QUANTITIES}
    halves = {q: agreement([[h[q] for h in p["halves"]] for p in pts]) for q in ("E_ip", "L", "O")}
    by_build = {b: {q: agreement([[r[q] for r in p["reps"].values()] for p in pts if build(p) == b])
                    for q in QUANTITIES} for b in sorted({build(p) for p in pts})}
    ip_std = cross([p["E_ip"] for p in pts], [p["E_std"] for p in pts])
    ip_std_reps = cross([r["E_ip"] for p in pts for r in p["reps"].values() if r["E_std"] is not None],
                        [r["E_std"] for p in pts for r in p["reps"].values() if r["E_std"] is not None])
    # a leave-one-repeat-out median (the others) as the prediction of the repeat left out
    loro = {}
    for q in QUANTITIES:
        hit = tot = 0
        for p in pts:
            v = [r[q] for r in p["reps"].values() if r[q] is not None]
            if len(v) < 3:
                continue
            for i in range(len(v)):
                hit, tot = hit + within(float(np.median(v[:i] + v[i + 1:])), v[i]), tot + 1
        loro[q] = {"within": int(hit), "n": int(tot)}
    std = standard_rows(base)
    std_reps = {"E_std": agreement([g["E_std"].tolist() for _, g in std.groupby(["run"] + KEY)])}
    std_build = {b: agreement([g["E_std"].tolist() for k, g in std.groupby(["run"] + KEY)
                               if f"d{k[3]}-bn{k[4]}" == b]) for b in sorted({f"d{d}-bn{n}" for d, n in
                                                                             zip(std["head_dim"], std["block_n"])})}
    med = std.groupby(KEY + ["run"])["E_std"].median().reset_index()
    multi = [g for _, g in med.groupby(KEY) if g["run"].nunique() >= 2]
    across = agreement([g["E_std"].tolist() for g in multi])
    across_rows = [{**{c: int(g[c].iloc[0]) for c in KEY}, "runs": g["run"].tolist(),
                    "E_std_run_medians_us": [round(float(x), 1) for x in g["E_std"]]} for g in multi]
    # O relative to the FA-only time, per build: its spread over points and over repeats
    beta = {}
    for b in sorted({build(p) for p in pts}):
        pb = [p for p in pts if build(p) == b]
        per_point = [-p["O"] / p["T_ip"] for p in pb]
        per_rep = [-r["O"] / r["T_ip"] for p in pb for r in p["reps"].values()]
        beta[b] = {"points": len(pb), "beta_points": [round(x, 5) for x in per_point],
                   "beta_median": float(np.median(per_point)), "beta_min": float(min(per_point)),
                   "beta_max": float(max(per_point)), "beta_rep_min": float(min(per_rep)),
                   "beta_rep_max": float(max(per_rep))}
    res.update({"single_repeats": single, "single_repeats_by_build": by_build, "pair_halves": halves,
                "leave_one_repeat_out": loro, "inpair_vs_standard_pooled": ip_std,
                "inpair_vs_standard_same_repeat": ip_std_reps, "standard_single_repeats_all_runs": std_reps,
                "standard_single_repeats_by_build": std_build, "standard_across_runs": across,
                "standard_across_runs_rows": across_rows, "offset_relative_by_build": beta,
                "points": [{k: p[k] for k in ("run", "M", "heads", "head_dim", "block_n", "E_ip", "E_std", "L", "O",
                                                "T_ip", "T_std", "reps", "halves")} for p in pts]})
    for p in pts:
        rp = p["reps"].values()
        print(f"{label(p):<34} T {p['T_ip'] / 1e3:5.2f} ms  " + "  ".join(
            f"{q} {p[q]:5.0f} ({'/'.join('-' if r[q] is None else f'{r[q]:.0f}' for r in rp)})" for q in QUANTITIES))
    for q in QUANTITIES:
        print(f"single repeats {q:<5}: {fmt(single[q])}; leave-one-repeat-out median "
              f"{loro[q]['within']}/{loro[q]['n']}")
    for q, a in halves.items():
        print(f"pair halves    {q:<5}: {fmt(a)}")
    for b, v in by_build.items():
        print(f"  {b}: " + "; ".join(f"{q} {a['pairs_within']}/{a['pairs']}" for q, a in v.items()))
    print(f"in-pair vs standard, pooled: {json.dumps(ip_std)}; same repeat: {json.dumps(ip_std_reps)}")
    print(f"standard single repeats, every run with repeats: {fmt(std_reps['E_std'])}")
    for b, a in std_build.items():
        print(f"  {b}: {fmt(a)}")
    print(f"standard run medians across runs: {fmt(across)}")
    for r in across_rows:
        print(f"  {r['M']}:{r['heads']} d{r['head_dim']} bn{r['block_n']}: {r['E_std_run_medians_us']} "
              f"({', '.join(x.split('/')[-1] for x in r['runs'])})")
    for b, v in beta.items():
        print(f"beta_c {b}: median {v['beta_median']:.4f}, points {v['beta_min']:.4f}..{v['beta_max']:.4f}, "
              f"repeats {v['beta_rep_min']:.4f}..{v['beta_rep_max']:.4f}")
    return res


# ---------------------------------------------------------------- the offset candidates

def rule17_answers(base: Path) -> dict:
    """Rule 17's committed answers by (run, point): in-sample on the 17 committed points, pre-registered on 5."""
    out = {}
    for rec in RULE17:
        for p in json.loads((base / rec).read_text())["points"]:
            out[(p["run"], p["M"], p["heads"], p["head_dim"], p["block_n"])] = float(p["rule17"])
    return out


def _pkey(p: dict) -> tuple:
    return (p["run"], p["M"], p["heads"], p["head_dim"], p["block_n"])


def offset_answers(pts: list, r17: dict) -> list:
    """The criterion's candidates at every point, each constant from the other points only (leave one point out)."""
    for p in pts:
        p["rule17"] = r17[_pkey(p)]
        others = [q for q in pts if q is not p]
        same = [q for q in others if build(q) == build(p)]
        beta_b = float(np.median([-q["O"] / q["T_ip"] for q in same]))
        beta_all = float(np.median([-q["O"] / q["T_ip"] for q in others]))
        std_same = [q for q in same if q["E_std"] is not None and q["T_std"]]
        std_all = [q for q in others if q["E_std"] is not None and q["T_std"]]
        gamma_b = float(np.median([(q["L"] - q["E_std"]) / q["T_std"] for q in std_same]))
        gamma_all = float(np.median([(q["L"] - q["E_std"]) / q["T_std"] for q in std_all]))
        p.update({"beta_b": beta_b, "gamma_b": gamma_b, "beta_all": beta_all, "gamma_all": gamma_all,
                  "O_18a": -beta_b * p["T_ip"],
                  "E_18a": p["rule17"] - beta_b * p["T_ip"],
                  "E_18b": p["rule17"] - gamma_b * p["T_std"],
                  "E_18m": p["rule17"] + p["O"],
                  "E_zero": p["rule17"],
                  "E_beta_all": p["rule17"] - beta_all * p["T_ip"],
                  "E_gamma_all": p["rule17"] - gamma_all * p["T_std"]})
    return pts


CANDIDATES = {"18a": ("E_18a", "E_ip"), "18b": ("E_18b", "E_std"), "18m": ("E_18m", "E_std")}
BESIDE = {"O=0 vs E_ip": ("E_zero", "E_ip"), "O=0 vs E_std": ("E_zero", "E_std"),
          "one beta vs E_ip": ("E_beta_all", "E_ip"), "one gamma vs E_std": ("E_gamma_all", "E_std"),
          "18a vs E_std": ("E_18a", "E_std"), "18m vs E_ip (rule 17's L error, band on E_ip)": ("E_18m", "E_ip"),
          "18a's offset term vs O": ("O_18a", "O")}


def tally(pts: list, pred: str, meas: str) -> dict:
    use = [p for p in pts if p[meas] is not None]
    hits = [within(p[pred], p[meas]) for p in use]
    builds = sorted({build(p) for p in use})
    per_build = {b: int(sum(h for h, p in zip(hits, use) if build(p) == b)) for b in builds}
    reps = [within(p[pred], r[meas]) for p in use for r in p["reps"].values() if r[meas] is not None]
    return {"within": int(sum(hits)), "n": len(use), "by_build": per_build,
            "median_abs_error_us": float(np.median([abs(p[pred] - p[meas]) for p in use])),
            "repeats_within": int(sum(reps)), "repeats": len(reps)}


def qualifies(t: dict) -> bool:
    """``rule18-criterion.md``: >= 18 of 22 within and at least one point of each of the four builds."""
    return t["within"] >= 18 and len(t["by_build"]) == 4 and all(v >= 1 for v in t["by_build"].values())


def offset(args) -> dict:
    base = data_dir()
    pts = offset_answers(inpair_points(base), rule17_answers(base))
    cand = {k: tally(pts, *v) for k, v in CANDIDATES.items()}
    beside = {k: tally(pts, *v) for k, v in BESIDE.items()}
    q = {k: qualifies(v) for k, v in cand.items()}
    for p in pts:
        print(f"{label(p):<34} L {p['L']:4.0f} r17 {p['rule17']:4.0f}  O {p['O']:5.0f} O18a {p['O_18a']:5.0f}  "
              f"E_ip {p['E_ip']:4.0f}: 18a {p['E_18a']:4.0f}{'*' if within(p['E_18a'], p['E_ip']) else ' '}  "
              f"E_std {p['E_std']:5.0f}: 18b {p['E_18b']:4.0f}{'*' if within(p['E_18b'], p['E_std']) else ' '} "
              f"18m {p['E_18m']:4.0f}{'*' if within(p['E_18m'], p['E_std']) else ' '}  (beta_b {p['beta_b']:.4f}, "
              f"gamma_b {p['gamma_b']:.4f})")
    for k, v in {**cand, **beside}.items():
        print(f"{k:<40} {v['within']}/{v['n']} (median |error| {v['median_abs_error_us']:.0f} us; by build "
              f"{json.dumps(v['by_build'])}; single repeats {v['repeats_within']}/{v['repeats']})")
    print(f"qualifies (rule18-criterion.md: >= 18/22 and every build): {json.dumps(q)}")
    return {"what": "post hoc, leave one point out: the build-offset candidates of rule18-criterion.md added to rule "
                    "17's committed link-cost answers, against fused - FA-only (in-pair E_ip, standard E_std)",
            "criterion": "attention-extra/rule18-criterion.md", "rule17_records": list(RULE17),
            "candidates": cand, "beside": beside, "qualifies": q,
            "points": [{k: v for k, v in p.items() if k not in ("halves", "link_reps_us", "s_reps_us")} for p in pts]}


# ---------------------------------------------------------------- a repeat run

def pooled_triples(la: pd.DataFrame, kernel: pd.DataFrame, key: tuple) -> list:
    """Per disjoint triple of repeats (0-2, 3-5, ...) at ``key``: E_ip, O, L pooled over the triple's pairs (as
    ``measured_points`` pools a 3-repeat run) and E_std the median of the triple's standard residuals."""
    ps, ph = S.pair_rows(la), S.pair_rows(la, S.HBM)
    k = kernel[np.logical_and.reduce([kernel[c] == v for c, v in zip(KEY, key)]) & (kernel["variant"] == S.SPLIT)]
    reps = sorted(set(ps["rep"]) & set(ph["rep"]))
    out = []
    for i in range(0, len(reps) - 2, 3):
        t = reps[i:i + 3]
        e = float(ps[ps["rep"].isin(t)]["d_event"].median())
        o = float(ph[ph["rep"].isin(t)]["d_event"].median())
        s = k[k["rep"].isin(t)]["paired_minus_fa(us)"].astype(float)
        out.append({"reps": [int(x) for x in t], "E_ip": e, "O": o, "L": e - o,
                    "E_std": float(s.median()) if len(s) else None})
    return out


def judge(args) -> dict:
    base = data_dir()
    folder = base / args.judge
    pts = inpair_reps(folder, args.judge)
    launch = F._key(load_records(folder / "inpair-launch.parquet", "summary", table="frame")[0])
    kernel = load_records(folder / "attention-kernel.parquet", "kernel")[0]
    for p in pts:
        key = tuple(p[k] for k in KEY)
        la = launch[np.logical_and.reduce([launch[c] == v for c, v in zip(KEY, key)])]
        p["triples"] = pooled_triples(la, kernel, key)
    single = {q: agreement([[r[q] for r in p["reps"].values()] for p in pts]) for q in QUANTITIES}
    trip = {q: agreement([[t[q] for t in p["triples"]] for p in pts]) for q in QUANTITIES}
    ip_std_trip = cross([t["E_ip"] for p in pts for t in p["triples"]], [t["E_std"] for p in pts for t in p["triples"]])
    ip_std_reps = cross([r["E_ip"] for p in pts for r in p["reps"].values()],
                        [r["E_std"] for p in pts for r in p["reps"].values()])
    res = {"what": "a repeat run's instrument figures (fa_rule18.py --judge): single repeats and disjoint triples of "
                   "repeats (the pooled 3-repeat figure the rules score) against each other; in-pair against "
                   "standard", "run": args.judge, "single_repeats": single, "triples": trip,
           "inpair_vs_standard_triples": ip_std_trip, "inpair_vs_standard_same_repeat": ip_std_reps}
    for p in pts:
        print(f"{label(p):<34} T {p['T_ip'] / 1e3:5.2f} ms  repeats {len(p['reps'])}")
        for q in QUANTITIES:
            print(f"    {q:<5} repeats " + "/".join("-" if r[q] is None else f"{r[q]:.0f}" for r in p["reps"].values())
                  + "  triples " + "/".join("-" if t[q] is None else f"{t[q]:.0f}" for t in p["triples"]))
    for q in QUANTITIES:
        print(f"{q:<5}: single repeats {fmt(single[q])}; triples {fmt(trip[q])}")
    print(f"in-pair vs standard: triples {json.dumps(ip_std_trip)}; same repeat {json.dumps(ip_std_reps)}")
    if args.committed:
        old = {tuple(p[k] for k in KEY): p for p in inpair_points(base)}
        rows = []
        for p in pts:
            key = tuple(p[k] for k in KEY)
            if key not in old:
                continue
            o = old[key]
            row = {"point": f"{p['M']}:{p['heads']}:{p['head_dim']}:{p['block_n']}", "committed_run": o["run"]}
            for q in QUANTITIES:
                row[q] = {"committed": o[q], "triples": [t[q] for t in p["triples"]],
                          "committed_predicts_triple": [within(o[q], t[q]) for t in p["triples"] if t[q] is not None],
                          "triple_predicts_committed": [within(t[q], o[q]) for t in p["triples"] if t[q] is not None]}
            rows.append(row)
            print(f"{row['point']} against {o['run'].split('/')[-1]}: " + "; ".join(
                f"{q} {row[q]['committed']:.0f} vs " + "/".join(f"{x:.0f}" for x in row[q]['triples'] if x is not None)
                for q in QUANTITIES))
        res["committed_and_triples"] = {q: agreement([[old[tuple(p[k] for k in KEY)][q]] + [t[q] for t in p["triples"]]
                                                     for p in pts if tuple(p[k] for k in KEY) in old])
                                        for q in QUANTITIES}
        for q, a in res["committed_and_triples"].items():
            print(f"committed + fresh triples {q:<5}: {fmt(a)}")
        # beside, judges nothing: the committed answers (rule 17 on L; 18a / 18b, leave one point out, on E) at
        # these points against the fresh triples
        ans = {tuple(p[k] for k in KEY): p for p in offset_answers(list(old.values()), rule17_answers(base))}
        for row, p in zip(rows, [p for p in pts if tuple(p[k] for k in KEY) in old]):
            a = ans[tuple(p[k] for k in KEY)]
            row["beside"] = {f"{pred} vs {q}": [bool(within(a[pred], t[q])) for t in p["triples"] if t[q] is not None]
                             for pred, q in (("rule17", "L"), ("E_18a", "E_ip"), ("E_18b", "E_std"))}
            row["answers"] = {k: a[k] for k in ("rule17", "E_18a", "E_18b")}
        res["beside_committed_answers"] = {k: f"{sum(sum(r['beside'][k]) for r in rows)}/"
                                              f"{sum(len(r['beside'][k]) for r in rows)}" for k in rows[0]["beside"]} \
            if rows else {}
        print(f"beside: committed answers against the fresh triples: {json.dumps(res['beside_committed_answers'])}")
        res["against_committed"] = rows
        res["against_committed_summary"] = {q: {
            "committed_predicts_triple": int(sum(sum(r[q]["committed_predicts_triple"]) for r in rows)),
            "triple_predicts_committed": int(sum(sum(r[q]["triple_predicts_committed"]) for r in rows)),
            "n": int(sum(len(r[q]["committed_predicts_triple"]) for r in rows)),
            "points_all_agree": int(sum(all(r[q]["committed_predicts_triple"] + r[q]["triple_predicts_committed"])
                                        for r in rows)), "points": len(rows)} for q in QUANTITIES}
        for q, v in res["against_committed_summary"].items():
            print(f"against committed {q:<5}: committed -> triple {v['committed_predicts_triple']}/{v['n']}, triple -> "
                  f"committed {v['triple_predicts_committed']}/{v['n']}; points all agree {v['points_all_agree']}/"
                  f"{v['points']}")
    res["points"] = [{k: p[k] for k in ("run", "M", "heads", "head_dim", "block_n", "E_ip", "E_std", "L", "O",
                                        "T_ip", "T_std", "reps", "halves", "triples")} for p in pts]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--instrument", action="store_true", help="post hoc: the committed runs' agreement with themselves")
    g.add_argument("--offset", action="store_true", help="post hoc: the criterion's offset candidates")
    g.add_argument("--judge", help="a repeat run folder under data/ (an in-pair run)")
    ap.add_argument("--committed", action="store_true", help="with --judge: compare with the committed in-pair runs")
    ap.add_argument("--out", help="write the record (.json); never over an existing file")
    args = ap.parse_args(argv)
    F.check_out(args.out)
    if args.committed and not args.judge:
        raise InputError("--committed", True, "applies to --judge")
    if args.judge and not (data_dir() / args.judge / "inpair-launch.parquet").is_file():
        raise InputError("--judge", args.judge, "has no inpair-launch.parquet")
    res = instrument(args) if args.instrument else offset(args) if args.offset else judge(args)
    F.write_record(args.out, res)
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_rule18.py")
