"""Rule 14: the X-Stage's own exposure of the split tile-end Triton kernel -- its LINK COST, fused minus the same build
storing into device memory (``split_hbm``) -- predicted from the no-link time and the tile shape (issue 15 item 5;
``docs/calibration/attention-rule14.md``).

Rules 8-13 scored fused - FA-only, which holds a build offset (``split_hbm`` runs 0.6-1.0 % faster than FA-only,
``attention-rule13.md`` §2b). Here the scored quantity is L = median over pairs of (split - FA-only) minus median over
pairs of (split_hbm - FA-only) from the in-pair records (``fa_split_inpair_summary.offset_rows``), per (M, heads,
head dim, block_n); fused - FA-only (in-pair and the standard paired residual) is printed beside it.

Predictors, each at --fa-us = the measured split_hbm time (median event time), tile shape from the kernel config,
W = 8, the Ulysses layout (remote fraction default), platform ``h200-pcie-host``:

    replay            ``xstage replay fa`` as is (``predict_fa``: head-major, no split tail)
    replay_triton     the same with the Triton kernel's structure (own chunk last, split tails of 2 parts)
    sm_moe / sm_triton / sm_fa4
                      the schema-2 SM-side stage (``exit_waits_for_drain``) at the MoE defaults, the fitted Triton
                      law and the FA4 law (``predictions/fa-heldout-v2``)
    stall_d13         the sixth rule's global stall (q_c from the pers7 tile log, 0.35 MB) at rule 9's constant
                      drift 0.017 for both builds (``sim.predict_link.link_cost``; fitted in session 7 on other
                      runs' fused - FA-only rows, on no link cost)
    stall_fit         the one correction: the same model, its one drift fitted on one in-pair run
                      (``sim.predict_link.fit_drift``, grid 0-0.1 by 0.001) and judged on the other

    python benchmarks/fa_link_cost.py --posthoc [--out data/predictions/fa-link-cost-posthoc-h200-pcie-host.json]
    python benchmarks/fa_link_cost.py --stagger [--out data/predictions/fa-link-cost-stagger-posthoc-h200-pcie-host.json]
    python benchmarks/fa_link_cost.py --preregister 32768:6,45056:4:64:128 --out data/attention-extra/<pre>.json
    python benchmarks/fa_link_cost.py --judge attention-runs/<run> --preregistered attention-extra/<pre>.json
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fa_split_inpair_summary as S  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.paths import data_dir  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import atomic_write_text, load_records  # noqa: E402
from xstage.sim.platform import load_platform  # noqa: E402
from xstage.sim.predict import FaKernel, predict_fa  # noqa: E402
from xstage.sim.predict_link import fit_drift, link_cost, within  # noqa: E402

RUNS = ("attention-runs/0dfa499-inpair", "attention-runs/de0efae-rule13")
PLATFORM = "h200-pcie-host"
Q_C_BYTES = 0.35e6           # the sixth rule's q_c (pers7 tile log; predict_fa_congestion.measure), not refitted
D13 = 0.017                  # rule 9's rule9_const drift, not refitted
GRID = tuple(round(0.001 * i, 3) for i in range(101))
LAWS = "predictions/fa-heldout-v2-h200-pcie-host.json"
KEY = ["M", "heads", "head_dim", "block_n"]
FIXED = ("replay", "replay_triton", "sm_moe", "sm_triton", "sm_fa4", "stall_d13")


def _key(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with head_dim / block_n (the first in-pair runs measured d128 bn128 only and carry neither)."""
    return frame.assign(**{c: frame[c] if c in frame.columns else 128 for c in ("head_dim", "block_n")})


def measured_points(folder: Path, name: str) -> list:
    """Per (M, heads, head dim, block_n) of an in-pair run: the link cost L (pooled, and per repeat), the in-pair
    split - FA-only and split_hbm - FA-only, beta_c, the FA-only and split_hbm event times (medians over launches)
    and the standard paired residual of ``fused_wb_split`` (median and repeats)."""
    launch = _key(load_records(folder / "inpair-launch.parquet", "summary", table="frame")[0])
    kernel = load_records(folder / "attention-kernel.parquet", "kernel")[0]
    if "rep" not in kernel.columns:
        kernel = kernel.assign(rep=0)
    out = []
    for (M, h, d, bn), la in launch.groupby(KEY):
        ps, ph = S.pair_rows(la), S.pair_rows(la, S.HBM)
        if ps.empty or ph.empty:
            continue
        reps = [float(ps[ps["rep"] == r]["d_event"].median() - ph[ph["rep"] == r]["d_event"].median())
                for r in sorted(set(ps["rep"]) & set(ph["rep"]))]
        hbm = la[(la["block"] == S.HBM) & (la["variant"] == S.HBM)]["event(us)"]
        fa = la[la["variant"] == S.FA]["event(us)"]
        k = kernel[(kernel["M"] == M) & (kernel["heads"] == h) & (kernel["head_dim"] == d) & (kernel["block_n"] == bn)]
        s = k[k["variant"] == S.SPLIT]["paired_minus_fa(us)"].astype(float).tolist()
        fa_std = k[k["variant"] == S.FA]["time(us)"].astype(float)
        ds, dh = float(ps["d_event"].median()), float(ph["d_event"].median())
        out.append({"run": name, "M": int(M), "heads": int(h), "head_dim": int(d), "block_n": int(bn),
                    "link_us": ds - dh, "link_reps_us": reps, "d_split_us": ds, "d_hbm_us": dh,
                    "beta_c": float(-(ph["d_event"] / ph["fa_event_us"]).median()),
                    "fa_event_us": float(fa.median()), "nolink_us": float(hbm.median()),
                    "fa_std_us": float(fa_std.median()) if len(fa_std) else None,
                    "s_us": float(np.median(s)) if s else None, "s_reps_us": s, "pairs": int(len(ps))})
    return out


def kernel(p: dict, triton: bool = True, **extra) -> FaKernel:
    kw = dict(seq_len=p["M"], heads=p["heads"], head_dim=p["head_dim"], block_m=128, block_n=p["block_n"],
              world_size=8, fa_us=p["nolink_us"])
    if triton:
        kw.update(order="local_last", tail_parts=2, fa_tail_parts=2)
    return FaKernel(**kw, **extra)


def fixed_answers(p: dict, platform, laws: dict) -> dict:
    """The predictors that nothing here fits (module docstring), at ``p``'s measured no-link time."""
    sm = {"sm_moe": {}, **{f"sm_{f}": {"sm_store_GBps": laws[f]["r_sm_GBps"],
                                       "shared_buffer_MiB": laws[f]["Q_eff_MiB"]} for f in ("triton", "fa4")}}
    out = {"replay": predict_fa(kernel(p, triton=False), platform)["E_res_us"],
           "replay_triton": predict_fa(kernel(p), platform)["E_res_us"],
           **{k: predict_fa(kernel(p, exit_waits_for_drain=True, **v), platform)["E_res_us"] for k, v in sm.items()},
           "stall_d13": link_cost(kernel(p), platform, Q_C_BYTES, D13)["link_us"]}
    return {k: float(v) for k, v in out.items()}


def stall_fit(fit_on: list, platform) -> dict:
    """The one correction's drift fitted on the points ``fit_on`` (their measured link cost)."""
    return fit_drift(lambda d: [link_cost(kernel(p), platform, Q_C_BYTES, d)["link_us"] for p in fit_on],
                     [p["link_us"] for p in fit_on], GRID)


def score(points: list, keys) -> dict:
    """Per predictor: points within target of the pooled link cost, the median |error|, and single repeats within."""
    return {k: {"within": int(sum(within(p[k], p["link_us"]) for p in points)), "n": len(points),
                "median_abs_error_us": float(np.median([abs(p[k] - p["link_us"]) for p in points])),
                "repeats_within": int(sum(within(p[k], x) for p in points for x in p["link_reps_us"])),
                "repeats": int(sum(len(p["link_reps_us"]) for p in points))} for k in keys}


def show(p: dict, keys) -> str:
    reps = "/".join(f"{x:.0f}" for x in p["link_reps_us"])
    s = "-" if p.get("s_us") is None else f"{p['s_us']:.0f}"
    beside = f"fused-FA in-pair {p['d_split_us']:4.0f} std {s:>4}  " if "d_split_us" in p else ""
    return (f"{p['run'].split('/')[-1]:>15} {p['M']:>6}:{p['heads']} d{p['head_dim']} bn{p['block_n']}  no-link "
            f"{p['nolink_us'] / 1e3:6.2f} ms  L {p['link_us']:4.0f} ({reps})  {beside}" + " ".join(f"{k} {p[k]:5.0f}{'*' if within(p[k], p['link_us']) else ' '}" for k in keys))


def inputs():
    base = data_dir()
    return load_platform(PLATFORM), base, json.loads((base / LAWS).read_text())["laws"]


def at_input(points: list, args) -> list:
    """With ``--at-fa-only`` (beside, judges nothing): the predictors' input time is the FA-only build's median
    event time instead of the no-link build's (``nolink_us`` replaced; the measured L is unchanged)."""
    if getattr(args, "at_fa_only", False):
        for p in points:
            p["nolink_measured_us"], p["nolink_us"], p["input"] = p["nolink_us"], p["fa_event_us"], "fa_only"
    return points


def posthoc(args) -> dict:
    platform, base, laws = inputs()
    by_run = {n: at_input(measured_points(base / n, n), args) for n in RUNS}
    for pts in by_run.values():
        for p in pts:
            p.update(fixed_answers(p, platform, laws))
    fits = {}
    for fit_run, judge_run in (RUNS, RUNS[::-1]):
        f = stall_fit(by_run[fit_run], platform)
        fits[fit_run] = f
        for p in by_run[judge_run]:
            p["stall_fit"] = link_cost(kernel(p), platform, Q_C_BYTES, f["drift"])["link_us"]
            p["stall_fit_from"] = fit_run
    f_all = stall_fit([p for n in RUNS for p in by_run[n]], platform)
    keys = FIXED + ("stall_fit",)
    res = {"what": "rule 14 post hoc: the link cost (split - split_hbm) of the in-pair runs against the replay's "
                   "predictors at the measured split_hbm time; stall_fit judged on the run it was not fitted on",
           "platform": PLATFORM, "q_c_bytes": Q_C_BYTES, "d13": D13, "fits": fits, "fit_all_points": f_all,
           "score": {n: score(by_run[n], keys) for n in RUNS},
           "score_all": score([p for n in RUNS for p in by_run[n]], keys),
           "points": [p for n in RUNS for p in by_run[n]]}
    beside = [p for n in RUNS for p in by_run[n]]
    res["fused_minus_fa_beside"] = {
        k: {"in_pair_within": int(sum(within(p[k], p["d_split_us"]) for p in beside)),
            "standard_within": int(sum(within(p[k], p["s_us"]) for p in beside if p["s_us"] is not None)),
            "n": len(beside)} for k in ("stall_d13", "stall_fit")}
    for p in beside:
        print(show(p, keys))
    for n in RUNS:
        print(f"{n}: " + "  ".join(f"{k} {v['within']}/{v['n']} ({v['median_abs_error_us']:.0f}; repeats "
                                   f"{v['repeats_within']}/{v['repeats']})" for k, v in res["score"][n].items()))
    for n, f in fits.items():
        print(f"stall_fit on {n}: drift {f['drift']}, {f['within']}/{f['n']} in-sample ({f['median_abs_error_us']:.0f})")
    print(f"stall_fit on all 12 points: drift {f_all['drift']}, {f_all['within']}/{f_all['n']} "
          f"({f_all['median_abs_error_us']:.0f})")
    print("the same answers scored against fused - FA-only: " + json.dumps(res["fused_minus_fa_beside"]))
    return res


STAGGER_RUNS = ("attention", "attention-fa4/triton")     # and every folder of attention-runs/


def stagger_points(base: Path) -> list:
    """The split+stagger kernel's link cost in the standard timing, post hoc: per (run, M, heads, head dim, block_n)
    the median over repeats of ``fused_wb_split_stagger``'s paired residual minus ``fused_hbm``'s (the same build
    storing into device memory, timed in every run), the no-link time = FA-only + ``fused_hbm``'s residual."""
    folders = [base / n for n in STAGGER_RUNS] + sorted(p.parent for p in (base / "attention-runs").glob(
        "*/attention-kernel.parquet"))
    out = []
    for folder in folders:
        k = load_records(folder / "attention-kernel.parquet", "kernel")[0]
        k = (k if "rep" in k.columns else k.assign(rep=0))
        k = k[(k["num_stages"] == 3) & k["config"].str.contains(",tma")]
        reps = {}
        for (rep, M, h, d, bn), g in k.groupby(["rep"] + KEY):
            g = g.drop_duplicates("variant", keep="last").set_index("variant")
            if {"fa", "fused_hbm", "fused_wb_split_stagger"} <= set(g.index):
                r = g["paired_minus_fa(us)"]
                reps.setdefault((int(M), int(h), int(d), int(bn)), []).append(
                    (float(r["fused_wb_split_stagger"] - r["fused_hbm"]), float(g.loc["fa", "time(us)"] + r["fused_hbm"])))
        for (M, h, d, bn), v in sorted(reps.items()):
            out.append({"run": str(folder.relative_to(base)), "M": M, "heads": h, "head_dim": d, "block_n": bn,
                        "link_us": float(np.median([x for x, _ in v])), "link_reps_us": [x for x, _ in v],
                        "nolink_us": float(np.median([t for _, t in v]))})
    return out


def stagger_posthoc(args) -> dict:
    """Post hoc, judges nothing: the split+stagger kernel's link cost against rule 14's model and the replay, both
    with the stagger's sends (``send="stagger"``), at the no-link time."""
    platform, base, _ = inputs()
    pts = stagger_points(base)
    for p in pts:
        tail = (p["heads"] * p["M"] // 128) % 132 != 0
        k = kernel(p, triton=False, send="stagger", order="local_last", **(dict(tail_parts=2, fa_tail_parts=2) if tail
                                                                             else {}))
        p["rule14"] = link_cost(k, platform, Q_C_BYTES, D13)["link_us"]
        p["replay_triton"] = float(predict_fa(k, platform)["E_res_us"])
    keys = ("rule14", "replay_triton")
    for p in pts:
        print(show(p, keys))
    sc = score(pts, keys)
    print("split+stagger link cost: " + "  ".join(f"{k} {v['within']}/{v['n']} ({v['median_abs_error_us']:.0f}; "
                                                  f"repeats {v['repeats_within']}/{v['repeats']})" for k, v in sc.items()))
    return {"what": "post hoc: the split+stagger Triton kernel's link cost (fused_wb_split_stagger - fused_hbm, "
                    "standard timing) against rule 14's model and the replay with staggered sends",
            "platform": PLATFORM, "q_c_bytes": Q_C_BYTES, "drift": D13, "score": sc, "points": pts}


def parse_points(text: str) -> list:
    """[(M, heads, head_dim, block_n)] of "M:heads[:head_dim:block_n],..." (head dim and block_n default 128)."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        parts = item.split(":")
        if len(parts) not in (2, 4) or not all(x.isdigit() for x in parts):
            raise InputError("--preregister", item, "must be M:heads or M:heads:head_dim:block_n")
        M, h, d, bn = (int(x) for x in parts + ["128", "128"][: 4 - len(parts)])
        out.append((M, h, d, bn))
    return out


def estimate_nolink_us(base: Path, M: int, h: int, d: int, bn: int) -> float:
    """A no-link time before the run: the committed FA-only rows of the same build, their median time per head and
    M^2 at the nearest committed M, x h M^2, less the in-pair runs' median build offset (0.0078)."""
    rows = []
    for f in sorted((base / "attention-runs").glob("*/attention-kernel.parquet")):
        k = load_records(f, "kernel")[0]
        k = k[(k["variant"] == "fa") & (k["head_dim"] == d) & (k["block_n"] == bn) & (k["num_stages"] == 3)]
        rows += [(int(r["M"]), float(r["time(us)"]) / (int(r["heads"]) * float(r["M"]) ** 2)) for _, r in k.iterrows()]
    if not rows:
        raise InputError("--preregister", f"{M}:{h}:{d}:{bn}", "has no committed FA-only row of that build")
    near = min({m for m, _ in rows}, key=lambda m: abs(m - M))
    return float(np.median([c for m, c in rows if m == near]) * h * M * M * (1 - 0.0078))


def preregister(args) -> dict:
    platform, base, laws = inputs()
    pts = [p for n in RUNS for p in measured_points(base / n, n)]
    f_all = stall_fit(pts, platform)
    out = []
    for M, h, d, bn in parse_points(args.preregister):
        p = {"M": M, "heads": h, "head_dim": d, "block_n": bn, "nolink_us": estimate_nolink_us(base, M, h, d, bn)}
        k = kernel(p)                       # validates the shape
        tiles = h * M // 128
        if tiles % 132 == 0:
            raise InputError("--preregister", f"{M}:{h}", "fills whole waves (no split tail)")
        p["nolink_us_estimated"] = p.pop("nolink_us")
        p["stall_fit_at_estimate_us"] = link_cost(k, platform, Q_C_BYTES, f_all["drift"])["link_us"]
        p["stall_d13_at_estimate_us"] = link_cost(k, platform, Q_C_BYTES, D13)["link_us"]
        out.append(p)
        print(f"{M}:{h} d{d} bn{bn}: no-link est. {p['nolink_us_estimated'] / 1e3:.2f} ms, link cost at drift "
              f"{f_all['drift']}: {p['stall_fit_at_estimate_us']:.0f} us (d13: {p['stall_d13_at_estimate_us']:.0f})")
    return {"what": "rule 14's pre-registered link-cost predictor and its answers at fresh points (fa_link_cost.py "
                    "--preregister); scored at the measured split_hbm time",
            "platform": PLATFORM, "q_c_bytes": Q_C_BYTES, "drift": f_all["drift"], "drift_fit": f_all,
            "fit_points": [f"{p['run']}:{p['M']}:{p['heads']}" for p in pts], "points": out}


def judge(args) -> dict:
    platform, base, laws = inputs()
    pre = json.loads((base / args.preregistered).read_text())
    pts = measured_points(base / args.judge, args.judge)
    want = {(p["M"], p["heads"], p["head_dim"], p["block_n"]) for p in pre["points"]}
    pts = at_input([p for p in pts if (p["M"], p["heads"], p["head_dim"], p["block_n"]) in want], args)
    for p in pts:
        p.update(fixed_answers(p, platform, laws))
        p["rule14"] = link_cost(kernel(p), platform, Q_C_BYTES, pre["drift"])["link_us"]
        p["rule14_within"] = within(p["rule14"], p["link_us"])
        p["rule14_reps_within"] = [within(p["rule14"], x) for x in p["link_reps_us"]]
        p["rule14_vs_fused_minus_fa_in_pair_within"] = within(p["rule14"], p["d_split_us"])
        if p["s_us"] is not None:
            p["rule14_vs_fused_minus_fa_standard_within"] = within(p["rule14"], p["s_us"])
        # post hoc, judges nothing: the grid drift whose link cost is nearest the measured one at this point
        p["implied_drift"] = min(GRID, key=lambda d: abs(link_cost(kernel(p), platform, Q_C_BYTES, d)["link_us"]
                                                        - p["link_us"]))
    keys = ("rule14",) + FIXED
    for p in pts:
        print(show(p, keys) + f"  implied drift {p['implied_drift']}")
    sc = score(pts, keys) if pts else {}
    by_build = {b: score([p for p in pts if f"d{p['head_dim']}-bn{p['block_n']}" == b], ("rule14",))["rule14"]
                for b in sorted({f"d{p['head_dim']}-bn{p['block_n']}" for p in pts})}
    beside = {"in_pair_within": int(sum(p["rule14_vs_fused_minus_fa_in_pair_within"] for p in pts)),
              "standard_within": int(sum(p.get("rule14_vs_fused_minus_fa_standard_within", False) for p in pts)),
              "n": len(pts)}
    v = verdict(sc["rule14"]["within"], len(pts), len(want)) if pts else "inconclusive"
    print("link cost: " + "  ".join(f"{k} {x['within']}/{x['n']} ({x['median_abs_error_us']:.0f}; repeats "
                                     f"{x['repeats_within']}/{x['repeats']})" for k, x in sc.items()))
    print(f"rule14 by build: {json.dumps(by_build)}")
    print(f"rule14 against fused - FA-only (beside, judges nothing): {json.dumps(beside)}")
    print(f"verdict (pre-registered rule): {v}")
    missing = sorted(want - {(p["M"], p["heads"], p["head_dim"], p["block_n"]) for p in pts})
    print(f"missing points: {missing}")
    return {"what": "rule 14 judged on a fresh run: the link cost (split - split_hbm) against the pre-registered "
                    "predictor at the measured split_hbm time; fused - FA-only beside",
            "run": args.judge, "preregistered": args.preregistered, "drift": pre["drift"], "verdict": v,
            "score": sc, "score_by_build": by_build, "rule14_vs_fused_minus_fa": beside,
            "implied_drift_post_hoc": {f"{p['M']}:{p['heads']}:{p['head_dim']}:{p['block_n']}": p["implied_drift"]
                                       for p in pts},
            "missing": missing, "points": pts}


def verdict(n_within: int, n: int, planned: int) -> str:
    """The pre-registered rule (``rule14-preregistration.md``): supported at >= 80 % within (>= 4 of 5), refuted
    below 60 % (<= 2 of 5), partial between; inconclusive with fewer than 3 points measured."""
    if n < 3 or n > planned:
        return "inconclusive"
    share = n_within / n
    return "supported" if share >= 0.8 else "refuted" if share < 0.6 else "partial"


def check_out(out) -> None:
    """``--out`` must not name an existing file: records are never overwritten."""
    if out and Path(out).exists():
        raise InputError("--out", out, "already exists (records are never overwritten)")


def write_record(out, res: dict) -> None:
    """``res`` with its provenance into ``out`` (.json) by temp + rename, when ``out`` is given."""
    if out:
        res["provenance"] = provenance()
        atomic_write_text(Path(out), json.dumps(res, indent=1, default=str), overwrite=False)
        print(f"wrote {out}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--posthoc", action="store_true", help="score the committed in-pair runs")
    g.add_argument("--stagger", action="store_true", help="post hoc: the split+stagger kernel's link cost")
    g.add_argument("--preregister", help="M:heads[:head_dim:block_n],... fresh points")
    g.add_argument("--judge", help="an in-pair run folder under data/")
    ap.add_argument("--preregistered", help="with --judge: the pre-registration record under data/")
    ap.add_argument("--at-fa-only", action="store_true", help="with --posthoc / --judge: predict at the FA-only "
                    "time instead of the no-link time (beside; the pre-registered score is at the no-link time)")
    ap.add_argument("--out", help="write the record (.json); never over an existing file")
    args = ap.parse_args(argv)
    check_out(args.out)
    if args.at_fa_only and not (args.posthoc or args.judge):
        raise InputError("--at-fa-only", True, "applies to --posthoc or --judge")
    if args.judge and not args.preregistered:
        raise InputError("--preregistered", None, "is needed with --judge")
    if args.judge and not (data_dir() / args.judge / "inpair-launch.parquet").is_file():
        raise InputError("--judge", args.judge, "has no inpair-launch.parquet")
    res = posthoc(args) if args.posthoc else stagger_posthoc(args) if args.stagger else \
        preregister(args) if args.preregister else judge(args)
    write_record(args.out, res)
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_link_cost.py")
