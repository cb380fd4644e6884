"""Rule 19: an instrument for the split Triton kernel's fused - FA-only that scores itself, and the committed rules
17, 18a and 18b judged on it at fresh points (issue 15 item 5; ``docs/calibration/attention-rule19.md``;
pre-registration ``data/attention-extra/rule19-preregistration.md``).

The instrument (``benchmarks/gpu/fa_rule19.py``): the plain builds a user runs, CUDA graphs, FA-only and the fused
kernel back to back N times (order alternating) in block A, then again in block B. Per point:

    E       median of the 2N paired differences fused_wb_split - FA-only (both blocks); a 95 % bootstrap interval
    E_A/E_B the two blocks' medians; the point agrees with itself when each is within of the other
    O       the same for split_hbm - FA-only (N_O pairs per block); L = E - O
    T       the FA-only launches' median time in the fused pairs

Band: a within of b when |a - b| <= max(20 us, 0.2 |b|) (``sim.predict_link.within``, a as the prediction of b).

The rules, as committed, their constants fixed in the plan before the run (``--preregister``):

    rule 17  ``link_cost`` at drift 0.00573 + 0.57 D_nl, --fa-us the in-pair ``split_hbm`` launches' median event
             time, D_nl their wave log's (``sim.predict_link.log_drift``): the in-pair block of the same call
    18a      rule 17 - beta_b T_ip   (beta_b: the build's median in-pair offset fraction -O / T_ip over its committed
             points; T_ip: the in-pair FA-only launches' median time)
    18b      rule 17 - gamma_b T     (gamma_b: the build's median (L - E_std) / T_std over its committed points)

    python benchmarks/fa_rule19.py --preregister M:heads:head_dim:block_n,... --committed-points ... \\
        --out data/attention-extra/fa-rule19-preregistered-h200-pcie-host.json
    python benchmarks/fa_rule19.py --judge attention-runs/<run> \\
        --preregistered attention-extra/fa-rule19-preregistered-h200-pcie-host.json [--out ...]
"""

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fa_link_cost as F  # noqa: E402
import fa_rule17 as R17  # noqa: E402
import fa_split_inpair_summary as S  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.paths import data_dir  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim.predict_link import RULE17_DRIFT_LINE, link_cost, log_drift, within  # noqa: E402

OFFSET_RECORD = "predictions/fa-rule18-offset-h200-pcie-host.json"
RULE17_RECORDS = ("predictions/fa-rule17-posthoc-h200-pcie-host.json",
                  "predictions/fa-rule17-judged-h200-pcie-host.json")
# the per-pair spread of fused - FA-only as a fraction of the FA-only time, per build (the committed in-pair runs'
# MAD-scaled per-pair SD: ed474bb-rule18, 24ac5e2-rule17), used only to size the pairs per block before the run
PAIR_SPREAD = {"d128-bn128": 0.011, "d128-bn64": 0.006, "d64-bn128": 0.006, "d64-bn64": 0.003}
N_MIN, N_MAX, N_OFFSET = 48, 400, 32
Z_BLOCKS = 2.9                    # 1.645 x sqrt(2) x 1.25: two medians within the band 9 times in 10
BOOTSTRAP = 2000
SELF_AGREEMENT_SHARE = 0.9
RULES = ("rule17", "E_18a", "E_18b")


def build(p: dict) -> str:
    return f"d{p['head_dim']}-bn{p['block_n']}"


def key(p: dict) -> tuple:
    return (int(p["M"]), int(p["heads"]), int(p["head_dim"]), int(p["block_n"]))


# ---------------------------------------------------------------- constants and the plan

def offset_constants(base: Path) -> dict:
    """{build: {"beta_b", "gamma_b", "points"}}: the medians over the build's committed in-pair points of -O / T_ip and
    (L - E_std) / T_std (``fa_rule18.py --offset``'s record, all 22 points)."""
    pts = json.loads((base / OFFSET_RECORD).read_text())["points"]
    out = {}
    for b in sorted({build(p) for p in pts}):
        g = [p for p in pts if build(p) == b]
        out[b] = {"beta_b": float(np.median([-p["O"] / p["T_ip"] for p in g])),
                  "gamma_b": float(np.median([(p["L"] - p["E_std"]) / p["T_std"] for p in g])), "points": len(g)}
    return out


def build_D_nl(base: Path) -> dict:
    """{build: median D_nl} over the committed rule-17 records (to guess answers before the run only)."""
    d = {}
    for rec in RULE17_RECORDS:
        for p in json.loads((base / rec).read_text())["points"]:
            d.setdefault(build(p), []).append(float(p["D_nl"]))
    return {b: float(np.median(v)) for b, v in d.items()}


def pairs_per_block(T_us: float, E_us: float, spread: float) -> int:
    """Pairs per block so that two blocks' medians land within the band of each other 9 times in 10, if the pairs'
    differences spread by ``spread`` x T: ceil((Z_BLOCKS x spread x T / band)^2), clamped to [N_MIN, N_MAX]."""
    band = max(20.0, 0.2 * abs(E_us))
    return int(min(N_MAX, max(N_MIN, math.ceil((Z_BLOCKS * spread * T_us / band) ** 2))))


def rule_answers(p: dict, platform, const: dict, D_nl: float, T_ip: float, T: float) -> dict:
    """rule 17 at ``p``'s ``nolink_us`` and ``D_nl``; 18a at T_ip; 18b at T (the build's frozen constants)."""
    drift = RULE17_DRIFT_LINE["a"] + RULE17_DRIFT_LINE["b"] * D_nl
    r17 = float(link_cost(F.kernel(p), platform, F.Q_C_BYTES, min(max(drift, 0.0), 0.999))["link_us"])
    c = const[build(p)]
    return {"drift17": drift, "rule17": r17, "E_18a": r17 - c["beta_b"] * T_ip, "E_18b": r17 - c["gamma_b"] * T}


def preregister(args) -> dict:
    platform, base, _ = F.inputs()
    const = offset_constants(base)
    dnl = build_D_nl(base)
    committed = {key(dict(zip(("M", "heads", "head_dim", "block_n"), x)))
                 for x in F.parse_points(args.committed_points or "")}
    out = []
    for M, h, d, bn in F.parse_points(args.preregister) + sorted(committed):
        p = {"M": M, "heads": h, "head_dim": d, "block_n": bn, "fresh": (M, h, d, bn) not in committed}
        if (h * M // 128) % 132 == 0:
            raise InputError("--preregister", f"{M}:{h}", "fills whole waves (no split tail)")
        T = R17.estimate_nolink_us(base, M, h, d, bn)
        p["nolink_us"] = T
        a = rule_answers(p, platform, const, dnl[build(p)], T, T)
        p.update({"T_estimated_us": T, "answers_at_estimate_us": {k: a[k] for k in RULES},
                  "pairs_per_block": pairs_per_block(T, a["E_18a"], PAIR_SPREAD[build(p)]),
                  "pairs_offset": N_OFFSET})
        p.pop("nolink_us")
        out.append(p)
        print(f"{M}:{h} {build(p)} {'fresh' if p['fresh'] else 'committed'}: T est. {T / 1e3:5.2f} ms; answers "
              + ", ".join(f"{k} {v:.0f}" for k, v in p["answers_at_estimate_us"].items())
              + f" us; N {p['pairs_per_block']} + {N_OFFSET} per block")
    est = sum((2 * (p["pairs_per_block"] + N_OFFSET) + 2 * 16 + 2 * 8) * 2 * p["T_estimated_us"] for p in out) / 1e6
    print(f"timed launches: {est:.0f} s (estimate, without compiles and checks)")
    return {"what": "rule 19's plan (fa_rule19.py --preregister): the points, the pairs per block, and the rules' "
                    "constants frozen before the run", "platform": F.PLATFORM, "q_c_bytes": F.Q_C_BYTES,
            "rule17_line": dict(RULE17_DRIFT_LINE), "offset_constants": const, "offset_record": OFFSET_RECORD,
            "pair_spread": PAIR_SPREAD, "n_min": N_MIN, "n_max": N_MAX, "self_agreement_share": SELF_AGREEMENT_SHARE,
            "timed_launch_s_estimate": est, "points": out}


# ---------------------------------------------------------------- the instrument

def bootstrap_ci(x, n: int = BOOTSTRAP, seed: int = 19) -> tuple:
    """95 % percentile interval of the median of ``x`` by resampling (seeded)."""
    x = np.asarray(x, float)
    rng = np.random.default_rng(seed)
    med = np.median(x[rng.integers(0, len(x), (n, len(x)))], axis=1)
    return float(np.quantile(med, 0.025)), float(np.quantile(med, 0.975))


def agrees(a: float, b: float) -> bool:
    """Each of two measurements within of the other."""
    return bool(within(a, b) and within(b, a))


def instrument_point(pairs: pd.DataFrame, variant: str) -> dict:
    """One point's figures for ``variant`` from its graph and direct pairs (module doc)."""
    g = pairs[(pairs["protocol"] == "graph") & (pairs["variant"] == variant)]
    if g.empty:
        raise InputError("pairs", variant, "has no graph pairs at this point")
    d = g["diff(us)"].to_numpy(float)
    a = float(g[g["block"] == "A"]["diff(us)"].median())
    b = float(g[g["block"] == "B"]["diff(us)"].median())
    lo, hi = bootstrap_ci(d)
    dr = pairs[(pairs["protocol"] == "direct") & (pairs["variant"] == variant)]
    inner = []                  # beside: each block's first half of pairs against its second half
    for blk in ("A", "B"):
        x = g[g["block"] == blk].sort_values("pair")["diff(us)"].to_numpy(float)
        inner.append(agrees(float(np.median(x[: len(x) // 2])), float(np.median(x[len(x) // 2:]))))
    return {"median_us": float(np.median(d)), "mean_us": float(np.mean(d)), "ci95_us": [lo, hi], "A_us": a, "B_us": b,
            "halves_agree": agrees(a, b), "inner_halves_agree": inner, "pairs": int(len(d)),
            "pair_sd_us": float(np.std(d, ddof=1)),
            "pair_mad_sd_us": float(1.4826 * np.median(np.abs(d - np.median(d)))),
            "fa_us": float(g["fa(us)"].median()), "other_us": float(g["other(us)"].median()),
            "direct_us": float(dr["diff(us)"].median()) if len(dr) else None,
            "direct_fa_us": float(dr["fa(us)"].median()) if len(dr) else None,
            "direct_other_us": float(dr["other(us)"].median()) if len(dr) else None}


def inpair_point(launch: pd.DataFrame, waves: pd.DataFrame, k: tuple) -> dict:
    """The committed instrument at the same point: E_ip, O_ip, the FA-only and split_hbm event times (medians over
    their launches), D_nl from the split_hbm wave log."""
    m = np.logical_and.reduce([launch[c] == v for c, v in zip(F.KEY, k)])
    la = launch[m]
    ps, ph = S.pair_rows(la), S.pair_rows(la, S.HBM)
    hbm = la[(la["block"] == S.HBM) & (la["variant"] == S.HBM)]["event(us)"]
    split = la[(la["block"] == S.SPLIT) & (la["variant"] == S.SPLIT)]["event(us)"]
    w = waves[np.logical_and.reduce([waves[c] == v for c, v in zip(F.KEY, k)])]
    return {"E_ip": float(ps["d_event"].median()), "O_ip": float(ph["d_event"].median()),
            "T_ip": float(la[la["variant"] == S.FA]["event(us)"].median()), "nolink_us": float(hbm.median()),
            "split_ip_us": float(split.median()), "D_nl": log_drift(w)["D_nl"], "pairs_ip": int(len(ps))}


def committed_values(base: Path) -> dict:
    """{point: {"E_ip", "E_std", "O", "L", "run"}} of the committed in-pair points (rule 18's record; the repeat run's
    pooled figures beside)."""
    out = {}
    for p in json.loads((base / OFFSET_RECORD).read_text())["points"]:
        out.setdefault(key(p), []).append({k: p[k] for k in ("run", "E_ip", "E_std", "O", "L")})
    judged = base / "predictions/fa-rule18-judged-h200-pcie-host.json"
    if judged.is_file():
        for p in json.loads(judged.read_text())["points"]:
            out.setdefault(key(p), []).append({"run": p["run"], **{k: p[k] for k in ("E_ip", "E_std", "O", "L")}})
    return out


def load_run(folder: Path) -> tuple:
    pairs = load_records(folder / "rule19-pairs.parquet", "summary", table="frame")[0]
    launch = F._key(load_records(folder / "inpair-launch.parquet", "summary", table="frame")[0])
    waves = load_records(folder / "inpair-wave.parquet", "summary", table="frame")[0]
    return pairs, launch, waves


def judge_points(pairs: pd.DataFrame, launch: pd.DataFrame, waves: pd.DataFrame, plan: dict, platform) -> list:
    """Per planned point that was measured: the instrument's figures, the committed instrument's, and the rules'
    answers with the plan's frozen constants."""
    const = plan["offset_constants"]
    done = {key(dict(zip(F.KEY, x))) for x in pairs[F.KEY].drop_duplicates().itertuples(index=False)}
    out = []
    for q in plan["points"]:
        k = key(q)
        if k not in done:
            continue
        pp = pairs[np.logical_and.reduce([pairs[c] == v for c, v in zip(F.KEY, k)])]
        p = {"M": k[0], "heads": k[1], "head_dim": k[2], "block_n": k[3], "fresh": bool(q["fresh"]),
             "pairs_per_block": int(q["pairs_per_block"]), "E": instrument_point(pp, "fused_wb_split"),
             "O": instrument_point(pp, "split_hbm")}
        p["L_us"] = p["E"]["median_us"] - p["O"]["median_us"]
        p.update(inpair_point(launch, waves, k))
        p.update(rule_answers(p, platform, const, p["D_nl"], p["T_ip"], p["E"]["fa_us"]))
        e = p["E"]["median_us"]
        p["within"] = {r: bool(within(p[r], e)) for r in RULES}
        p["within_halves"] = {r: [bool(within(p[r], p["E"]["A_us"])), bool(within(p[r], p["E"]["B_us"]))]
                              for r in RULES}
        p["within_E_ip"] = {r: bool(within(p[r], p["E_ip"])) for r in RULES}
        p["rule17_within_L"] = bool(within(p["rule17"], p["L_us"]))
        p["L_ip"] = p["E_ip"] - p["O_ip"]
        p["rule17_within_L_ip"] = bool(within(p["rule17"], p["L_ip"]))
        p["E_ip_agrees_E"] = agrees(p["E_ip"], e)
        out.append(p)
    return out


def score(pts: list) -> dict:
    fresh = [p for p in pts if p["fresh"]]
    halves = sum(p["E"]["halves_agree"] for p in pts)
    res = {"fresh_points": len(fresh), "points": len(pts),
           "self_agreement_E": {"agree": int(halves), "n": len(pts), "share": halves / len(pts) if pts else None,
                                "fresh_agree": int(sum(p["E"]["halves_agree"] for p in fresh))},
           "self_agreement_O": {"agree": int(sum(p["O"]["halves_agree"] for p in pts)), "n": len(pts)},
           "rules": {}}
    res["instrument_ok"] = bool(pts) and halves / len(pts) >= SELF_AGREEMENT_SHARE
    for r in RULES:
        w = [p["within"][r] for p in fresh]
        res["rules"][r] = {"within": int(sum(w)), "n": len(w), "share": sum(w) / len(w) if w else None,
                           "met": bool(w) and all(w),
                           "median_abs_error_us": float(np.median([abs(p[r] - p["E"]["median_us"]) for p in fresh]))
                           if fresh else None,
                           "within_both_halves": int(sum(all(p["within_halves"][r]) for p in fresh)),
                           "within_E_ip": int(sum(p["within_E_ip"][r] for p in fresh)),
                           "by_build": {b: f"{sum(p['within'][r] for p in fresh if build(p) == b)}/"
                                           f"{sum(1 for p in fresh if build(p) == b)}"
                                        for b in sorted({build(p) for p in fresh})}}
    res["rule17_vs_L"] = {"within": int(sum(p["rule17_within_L"] for p in fresh)), "n": len(fresh)}
    res["rule17_vs_L_ip"] = {"within": int(sum(p["rule17_within_L_ip"] for p in fresh)), "n": len(fresh)}
    res["inner_halves_agree_E"] = {"agree": int(sum(sum(p["E"]["inner_halves_agree"]) for p in pts)),
                                   "n": 2 * len(pts)}
    res["E_ip_agrees_E"] = {"agree": int(sum(p["E_ip_agrees_E"] for p in pts)), "n": len(pts)}
    return res


def judge(args) -> dict:
    platform, base, _ = F.inputs()
    plan = json.loads((base / args.preregistered).read_text())
    pairs, launch, waves = load_run(base / args.judge)
    pts = judge_points(pairs, launch, waves, plan, platform)
    sc = score(pts)
    old = committed_values(base)
    for p in pts:
        p["committed"] = old.get(key(p), [])
        e = p["E"]
        print(f"{p['M']:>6}:{p['heads']} {build(p):<10} {'fresh' if p['fresh'] else 'comm.'} T "
              f"{e['fa_us'] / 1e3:5.2f} ms N {p['pairs_per_block']:>3}  E {e['median_us']:5.0f} "
              f"[{e['ci95_us'][0]:.0f}, {e['ci95_us'][1]:.0f}] A/B {e['A_us']:.0f}/{e['B_us']:.0f}"
              f"{' ok' if e['halves_agree'] else ' NO'} (sd {e['pair_mad_sd_us']:.0f})"
              f"  O {p['O']['median_us']:4.0f} L {p['L_us']:4.0f}  E_ip {p['E_ip']:4.0f} O_ip {p['O_ip']:4.0f} L_ip "
              f"{p['L_ip']:4.0f}  "
              f"direct {e['direct_us']:4.0f}  " + " ".join(f"{r} {p[r]:4.0f}{'*' if p['within'][r] else ' '}"
                                                          for r in RULES)
              + "".join(f"  [{c['run'].split('/')[-1]}: E_ip {c['E_ip']:.0f} E_std {c['E_std']:.0f}]"
                        for c in p["committed"]), flush=True)
        print(f"{'':>18} FA-only: graph {e['fa_us']:.0f}, direct {e['direct_fa_us']:.0f}, in-pair {p['T_ip']:.0f} us;"
              f" split: graph {e['other_us']:.0f}, direct {e['direct_other_us']:.0f}, in-pair {p['split_ip_us']:.0f}")
    print(f"instrument: E halves agree at {sc['self_agreement_E']['agree']}/{sc['self_agreement_E']['n']} points "
          f"(criterion >= {SELF_AGREEMENT_SHARE}: {'met' if sc['instrument_ok'] else 'not met'}); O "
          f"{sc['self_agreement_O']['agree']}/{sc['self_agreement_O']['n']}")
    for r, v in sc["rules"].items():
        print(f"{r}: {v['within']}/{v['n']} fresh points within ({'MET' if v['met'] else 'not met'}); median |error| "
              f"{v['median_abs_error_us']:.0f} us; both halves {v['within_both_halves']}; vs E_ip {v['within_E_ip']}; "
              f"by build {json.dumps(v['by_build'])}")
    print(f"beside: each block's first half of pairs against its second: E {sc['inner_halves_agree_E']['agree']}/"
          f"{sc['inner_halves_agree_E']['n']}; rule 17 vs the in-pair L_ip {sc['rule17_vs_L_ip']['within']}/"
          f"{sc['rule17_vs_L_ip']['n']}")
    print(f"rule 17 vs L: {sc['rule17_vs_L']['within']}/{sc['rule17_vs_L']['n']}; E_ip agrees with E at "
          f"{sc['E_ip_agrees_E']['agree']}/{sc['E_ip_agrees_E']['n']}")
    return {"what": "rule 19: the self-scoring instrument's fused - FA-only (CUDA graphs, plain builds, two blocks of "
                    "alternating pairs) and rules 17 / 18a / 18b with frozen constants at fresh points",
            "run": args.judge, "preregistered": args.preregistered, "score": sc, "points": pts}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--preregister", help="fresh points M:heads:head_dim:block_n,...")
    g.add_argument("--judge", help="a rule-19 run folder under data/")
    ap.add_argument("--committed-points", help="with --preregister: committed points measured again, M:h:d:bn,...")
    ap.add_argument("--preregistered", help="with --judge: the plan record under data/")
    ap.add_argument("--out", help="write the record (.json); never over an existing file")
    args = ap.parse_args(argv)
    F.check_out(args.out)
    if args.judge and not args.preregistered:
        raise InputError("--preregistered", None, "is needed with --judge")
    if args.judge and not (data_dir() / args.judge / "rule19-pairs.parquet").is_file():
        raise InputError("--judge", args.judge, "has no rule19-pairs.parquet")
    res = preregister(args) if args.preregister else judge(args)
    F.write_record(args.out, res)
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_rule19.py")
