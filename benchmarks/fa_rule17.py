"""Rule 17: rule 14 (the split Triton kernel's link cost under the global stall) at drift a + b x D_nl, D_nl the
no-link build's own drift read from its tile log as rule 16 reads it (issue 15 item 5;
``docs/calibration/attention-rule17.md``).

Rule 16 (``fa_rule16.py``) found the no-link log's drift D_nl stable per build (0.0198 head dim 128 block_n 128,
0.0096 block_n 64, 0.0106 head dim 64) but on another scale than the drift the stall model needs (0.81x for the
first build, 1.13-1.14x for the other two). Rule 17 maps it by a line, fitted once on the 17 committed in-pair
points and then frozen (``data/attention-extra/rule17-qualification.md``):

    d_b     per build: ``sim.predict_link.fit_drift`` over the build's points (rule 14's grid 0-0.1 by 0.001)
    a, b    the least-squares line of d_b on the build's median D_nl (three builds, unweighted); a rounded to
            0.00001, b to 0.001
    rule 17 ``link_cost`` at drift a + b x D_nl (the point's own), --fa-us = the median ``split_hbm`` event time

    python benchmarks/fa_rule17.py --posthoc [--out data/predictions/fa-rule17-posthoc-h200-pcie-host.json]
    python benchmarks/fa_rule17.py --preregister M:heads:head_dim:block_n,... --out data/attention-extra/<pre>.json
    python benchmarks/fa_rule17.py --judge attention-runs/<run> --preregistered attention-extra/<pre>.json [--out ...]

The judgement reads only the fresh run's ``split_hbm`` launches (their event times and wave logs) to predict, and
the ``fused_wb_split`` launches only to measure L. fused - FA-only (in-pair) is printed beside, judging nothing.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fa_link_cost as F  # noqa: E402
import fa_rule16 as R16  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.sim.predict_link import fit_drift, link_cost, within  # noqa: E402

RUNS = R16.RUNS
LEAVABLE = RUNS[:2]          # a86e88c holds the only points of the other two builds: it cannot be left out
_CACHE = {}


def build(p: dict) -> str:
    return f"d{p['head_dim']}-bn{p['block_n']}"


def answer(p: dict, platform, drift: float) -> float:
    """Rule 14's link cost of ``p`` at ``drift`` (clipped to [0, 0.999]); memoised on the point and the drift."""
    d = min(max(float(drift), 0.0), 0.999)
    key = (p["run"], p["M"], p["heads"], p["head_dim"], p["block_n"], p["nolink_us"], d)
    if key not in _CACHE:
        _CACHE[key] = link_cost(F.kernel(p), platform, F.Q_C_BYTES, d)["link_us"]
    return _CACHE[key]


def fit_line(pts: list, platform) -> dict:
    """(a, b) of rule 17 on ``pts``: per build d_b = ``fit_drift`` over its points, then the least-squares line of
    d_b on the build's median D_nl; a rounded to 0.00001, b to 0.001. Needs at least two builds."""
    builds = sorted({build(p) for p in pts})
    if len(builds) < 2:
        raise InputError("pts", builds, "must span at least two builds to fit a line")
    per = {}
    for b in builds:
        g = [p for p in pts if build(p) == b]
        f = fit_drift(lambda d: [answer(p, platform, d) for p in g], [p["link_us"] for p in g], F.GRID)
        per[b] = {"D_nl_median": float(np.median([p["D_nl"] for p in g])), "d_b": f["drift"], "points": len(g),
                  "within_at_d_b": f["within"]}
    x = np.array([per[b]["D_nl_median"] for b in builds])
    y = np.array([per[b]["d_b"] for b in builds])
    slope, icpt = np.polyfit(x, y, 1)
    return {"a": round(float(icpt), 5), "b": round(float(slope), 3), "a_exact": float(icpt), "b_exact": float(slope),
            "per_build": per}


def drift17(line: dict, D_nl: float) -> float:
    return line["a"] + line["b"] * float(D_nl)


def tally(pts: list, key: str) -> dict:
    return R16.tally(pts, key)


def qualifies(s: dict, loro: dict) -> dict:
    """``rule17-qualification.md``: >= 16 of 17 in-sample, both new builds, leave-one-run-out >= 10 of 12."""
    held_in = sum(v["within"] for v in loro.values())
    held_n = sum(v["n"] for v in loro.values())
    ok = s["within"] >= 16 and s["new_builds_within"] == 2 and held_in >= 10
    return {"in_sample": f"{s['within']}/{s['n']}", "new_builds": f"{s['new_builds_within']}/2",
            "leave_one_run_out": f"{held_in}/{held_n}", "qualifies": bool(ok)}


def posthoc(args) -> dict:
    platform, base, _ = F.inputs()
    pts = R16.build_points(base)
    line = fit_line(pts, platform)
    for p in pts:
        p["drift17"] = drift17(line, p["D_nl"])
        p["rule17"] = answer(p, platform, p["drift17"])
        p["rule14"] = answer(p, platform, F.D13)
        p["rule16"] = answer(p, platform, p["D_nl"])
        p["rule16c"] = answer(p, platform, 0.85 * p["D_nl"])
    keys = ("rule17", "rule14", "rule16", "rule16c")
    sc = {k: tally(pts, k) for k in keys}
    loro = {}
    for run in LEAVABLE:
        fit_on = [p for p in pts if p["run"] != run]
        ln = fit_line(fit_on, platform)
        held = [p for p in pts if p["run"] == run]
        for p in held:
            p[f"rule17_without_{run.split('/')[-1]}"] = answer(p, platform, drift17(ln, p["D_nl"]))
        loro[run] = {"a": ln["a"], "b": ln["b"], "n": len(held),
                     "within": int(sum(within(p[f"rule17_without_{run.split('/')[-1]}"], p["link_us"])
                                       for p in held))}
    lobo = {}
    for bname in sorted({build(p) for p in pts}):     # beside, judges nothing
        others = {k: v for k, v in line["per_build"].items() if k != bname}
        x = [v["D_nl_median"] for v in others.values()]
        y = [v["d_b"] for v in others.values()]
        slope, icpt = np.polyfit(x, y, 1)
        held = [p for p in pts if build(p) == bname]
        pred = [answer(p, platform, icpt + slope * p["D_nl"]) for p in held]
        lobo[bname] = {"a": float(icpt), "b": float(slope), "n": len(held),
                       "within": int(sum(within(x_, p["link_us"]) for x_, p in zip(pred, held))),
                       "predictions_us": pred, "measured_us": [p["link_us"] for p in held]}
    q = qualifies(sc["rule17"], loro)
    for p in pts:
        print(f"{p['run'].split('/')[-1]:>15} {p['M']:>6}:{p['heads']} {build(p):<10} L {p['link_us']:4.0f}  D_nl "
              f"{p['D_nl']:.4f} -> drift {p['drift17']:.4f}  "
              + " ".join(f"{k} {p[k]:4.0f}{'*' if within(p[k], p['link_us']) else ' '}" for k in keys), flush=True)
    print(f"line: a = {line['a']}, b = {line['b']} (exact {line['a_exact']:.6f}, {line['b_exact']:.4f}); per build "
          + json.dumps(line["per_build"]))
    for k, v in sc.items():
        print(f"{k}: {v['within']}/{v['n']} (median |error| {v['median_abs_error_us']:.0f} us; new builds "
              f"{v['new_builds_within']}/2; single repeats {v['repeats_within']}/{v['repeats']})")
    print("leave one run out: " + json.dumps(loro))
    print("leave one build out (beside): " + json.dumps({k: {kk: (round(vv, 4) if isinstance(vv, float) else vv)
                                                             for kk, vv in v.items() if kk in ("a", "b", "n", "within")}
                                                         for k, v in lobo.items()}))
    print(f"qualification: {json.dumps(q)}")
    return {"what": "rule 17 post hoc (in-sample): rule 14's link cost at drift a + b x D_nl, (a, b) fitted on the "
                    "17 committed in-pair points (per-build fit_drift, then a line over the builds' median D_nl)",
            "platform": F.PLATFORM, "q_c_bytes": F.Q_C_BYTES, "runs": list(RUNS),
            "qualification_file": "attention-extra/rule17-qualification.md", "line": line, "score": sc,
            "leave_one_run_out": loro, "leave_one_build_out": lobo, "qualifies": q, "points": pts}


def estimate_nolink_us(base: Path, M: int, h: int, d: int, bn: int) -> float:
    """``fa_link_cost.estimate_nolink_us``; a build with no committed FA-only row (head dim 64 with block_n 64) is
    the head-dim-64 block_n-128 estimate x the block_n-64 / block_n-128 ratio of head dim 128."""
    try:
        return F.estimate_nolink_us(base, M, h, d, bn)
    except InputError:
        if (d, bn) != (64, 64):
            raise
        r = F.estimate_nolink_us(base, M, h, 128, 64) / F.estimate_nolink_us(base, M, h, 128, 128)
        return F.estimate_nolink_us(base, M, h, 64, 128) * r


def preregister(args) -> dict:
    platform, base, _ = F.inputs()
    rec = json.loads((base / "predictions/fa-rule17-posthoc-h200-pcie-host.json").read_text())
    if not rec["qualifies"]["qualifies"]:
        raise InputError("--preregister", rec["qualifies"], "rule 17 did not qualify: no pre-registration")
    line = {"a": rec["line"]["a"], "b": rec["line"]["b"]}
    known = {b: v["D_nl_median"] for b, v in rec["line"]["per_build"].items()}
    out = []
    for M, h, d, bn in F.parse_points(args.preregister):
        if (h * M // 128) % 132 == 0:
            raise InputError("--preregister", f"{M}:{h}", "fills whole waves (no split tail)")
        p = {"run": "pre", "M": M, "heads": h, "head_dim": d, "block_n": bn,
             "nolink_us": estimate_nolink_us(base, M, h, d, bn)}
        F.kernel(p)                                   # validates the shape
        b = build(p)
        guesses = [known[b]] if b in known else sorted(known.values())
        p["answers_at_estimate_us"] = {f"{g:.4f}": answer(p, platform, drift17(line, g)) for g in guesses}
        p["nolink_us_estimated"] = p.pop("nolink_us")
        p.pop("run")
        out.append(p)
        print(f"{M}:{h} {b}: no-link est. {p['nolink_us_estimated'] / 1e3:.2f} ms; rule 17 at D_nl "
              + ", ".join(f"{g}: {v:.0f} us" for g, v in p["answers_at_estimate_us"].items()))
    return {"what": "rule 17's pre-registered link-cost predictor (fa_rule17.py --preregister); scored at the fresh "
                    "run's measured split_hbm time and D_nl (its split_hbm wave logs)",
            "platform": F.PLATFORM, "q_c_bytes": F.Q_C_BYTES, "a": line["a"], "b": line["b"],
            "posthoc_record": "predictions/fa-rule17-posthoc-h200-pcie-host.json", "points": out}


def judge(args) -> dict:
    platform, base, _ = F.inputs()
    pre = json.loads((base / args.preregistered).read_text())
    line = {"a": pre["a"], "b": pre["b"]}
    folder = base / args.judge
    wd = R16.wave_drifts(folder)                      # split_hbm block: the split_hbm and FA-only launches
    want = {(p["M"], p["heads"], p["head_dim"], p["block_n"]) for p in pre["points"]}
    pts = [p for p in F.measured_points(folder, args.judge)
           if (p["M"], p["heads"], p["head_dim"], p["block_n"]) in want]
    for p in pts:
        key = (p["M"], p["heads"], p["head_dim"], p["block_n"])
        p["D_nl"] = float(np.median(wd[key]["nolink"]))
        p["D_nl_launches"] = wd[key]["nolink"]
        p["D_fa"] = float(np.median(wd[key]["fa"]))
        p["drift17"] = drift17(line, p["D_nl"])
        p["rule17"] = answer(p, platform, p["drift17"])        # inputs: split_hbm time and D_nl only
        p["rule17_within"] = within(p["rule17"], p["link_us"])
        p["rule17_reps_within"] = [within(p["rule17"], x) for x in p["link_reps_us"]]
        p["rule14"] = answer(p, platform, F.D13)                 # beside
        p["rule16"] = answer(p, platform, p["D_nl"])             # beside
        p["implied_drift"] = min(F.GRID, key=lambda d: abs(answer(p, platform, d) - p["link_us"]))
        p["fused_minus_fa_in_pair_us"] = p["d_split_us"]
        p["rule17_vs_fused_minus_fa_within"] = within(p["rule17"], p["d_split_us"])
        p["new_build"] = build(p) not in {"d128-bn128", "d128-bn64", "d64-bn128"}
    keys = ("rule17", "rule14", "rule16")
    for p in pts:
        reps = "/".join(f"{x:.0f}" for x in p["link_reps_us"])
        print(f"{p['M']:>6}:{p['heads']} {build(p):<10} no-link {p['nolink_us'] / 1e3:6.2f} ms  L {p['link_us']:4.0f} "
              f"({reps})  fused-FA {p['d_split_us']:4.0f}  D_nl {p['D_nl']:.4f} -> drift {p['drift17']:.4f} "
              f"(implied {p['implied_drift']:.3f})  "
              + " ".join(f"{k} {p[k]:4.0f}{'*' if within(p[k], p['link_us']) else ' '}" for k in keys), flush=True)
    sc = {k: tally(pts, k) for k in keys} if pts else {}
    v = F.verdict(sc["rule17"]["within"], len(pts), len(want)) if pts else "inconclusive"
    missing = sorted(want - {(p["M"], p["heads"], p["head_dim"], p["block_n"]) for p in pts})
    for k, x in sc.items():
        print(f"{k}: {x['within']}/{x['n']} (median |error| {x['median_abs_error_us']:.0f} us; repeats "
              f"{x['repeats_within']}/{x['repeats']})")
    print(f"verdict (pre-registered rule): {v}; missing points: {missing}")
    return {"what": "rule 17 judged on a fresh run: the link cost (split - split_hbm) against the pre-registered "
                    "a + b x D_nl drift at the measured split_hbm time and D_nl; rule 14 / rule 16 and fused - "
                    "FA-only beside", "run": args.judge, "preregistered": args.preregistered, "a": pre["a"],
            "b": pre["b"], "verdict": v, "score": sc, "missing": missing, "points": pts}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--posthoc", action="store_true", help="fit (a, b) and score the committed in-pair runs")
    g.add_argument("--preregister", help="M:heads[:head_dim:block_n],... fresh points")
    g.add_argument("--judge", help="an in-pair run folder under data/")
    ap.add_argument("--preregistered", help="with --judge: the pre-registration record under data/")
    ap.add_argument("--out", help="write the record (.json); never over an existing file")
    args = ap.parse_args(argv)
    F.check_out(args.out)
    if args.judge and not args.preregistered:
        raise InputError("--preregistered", None, "is needed with --judge")
    res = posthoc(args) if args.posthoc else preregister(args) if args.preregister else judge(args)
    F.write_record(args.out, res)
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_rule17.py")
