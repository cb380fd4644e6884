"""Rule 21: candidate rules for the split Triton kernel's fused - FA-only E on the plain builds a user runs, fitted
post hoc on the committed plain-build records, one frozen for a future call (issue 15 item 5;
``docs/calibration/attention-rule21.md``; pre-registration ``data/attention-extra/rule21-preregistration.md``).

The plain-build points (no instrumented build enters E):

    std     rule 18's standard residual E_std (CUDA graphs, plain builds) at its 22 committed points, T = T_std
            (``predictions/fa-rule18-offset-h200-pcie-host.json``; runs 0dfa499, de0efae, a86e88c, 24ac5e2)
    rule19  the 14 graph points of a6c27c3-rule19, E and T the graph medians, O the split_hbm graph median
            (``predictions/fa-rule19-judged-h200-pcie-host.json``)
    rule20  the 3 points of 71a2b52-rule20, the three arms pooled (24 blocks; median of block medians)
            (``attention-extra/fa-rule20-scored-h200-pcie-host.json``, ``posthoc.pooled_arms``)

The candidates, per build b (head dim, block_n), least squares without intercept; X = M x heads x head_dim / 1e6
(the output elements the fused launch stores to the host, in millions):

    frac          E = g_b T                     needs: build, T (the FA-only time)
    bytes_offset  E = a_b X - g_b T             needs: build, M, heads, T
    bytes_offset_pooled  E = a X - g T          the same with one a, g for all builds: needs M, heads, head_dim, T
    hbm_offset    E = O + a_b X                 needs: build, M, heads, O (a split_hbm - FA-only measurement);
                                                fitted on rule19 only (the one call with a plain-build O)

Held out: leave one point out, leave one call (run) out, and (the pooled form only) leave one build out; a point
counts when its prediction is within max(20 us, 20 %) of its E (``sim.predict_link.within``). All figures are post hoc.

``score`` reads the pre-registered call's run (``benchmarks/gpu/fa_rule21.sh``: ``benchmarks/gpu/fa_rule20.py`` over
the plan; the files ``fa_rule20.write_run`` writes) and applies the three criteria: the frozen rule within at every
fresh point, both splits of the fused blocks agreeing at >= 90 % of the points, and the ``hbm`` control arm's F (block
medians' variance over their SE^2) under 2 at >= 80 % of them.

    python benchmarks/fa_rule21.py posthoc [--out data/attention-extra/fa-rule21-posthoc-h200-pcie-host.json]
    python benchmarks/fa_rule21.py freeze --out data/attention-extra/fa-rule21-frozen-h200-pcie-host.json
    python benchmarks/fa_rule21.py score --run attention-runs/<run> \\
        --plan attention-extra/fa-rule21-plan.json [--out ...]   # the call's run (benchmarks/gpu/fa_rule21.sh)
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fa_link_cost as F  # noqa: E402
import fa_rule19 as R19  # noqa: E402
import fa_rule20 as R20  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.paths import data_dir  # noqa: E402
from xstage.sim.predict_link import within  # noqa: E402

STD_RECORD = "predictions/fa-rule18-offset-h200-pcie-host.json"
RULE19_RECORD = "predictions/fa-rule19-judged-h200-pcie-host.json"
RULE20_RECORD = "attention-extra/fa-rule20-scored-h200-pcie-host.json"
FROZEN = "attention-extra/fa-rule21-frozen-h200-pcie-host.json"
FORMS = {"frac": ("T",), "bytes_offset": ("X", "T"), "hbm_offset": ("X",), "bytes_offset_pooled": ("X", "T")}
NEEDS = {"frac": "build, T", "bytes_offset": "build, M, heads, T", "hbm_offset": "build, M, heads, O (split_hbm)",
         "bytes_offset_pooled": "M, heads, head_dim, T"}
SIGN = {"frac": (1.0,), "bytes_offset": (1.0, -1.0), "hbm_offset": (1.0,), "bytes_offset_pooled": (1.0, -1.0)}
SELF_AGREEMENT_SHARE = 0.9    # the instrument: both splits agree at >= 90 % of the points
F_CONTROL = 2.0               # the hbm control: F = var(block medians) / mean(SE^2) under 2 ...
CONTROL_SHARE = 0.8           # ... at >= 80 % of the points (8 of 10)
POOLED = ("bytes_offset_pooled",)       # one set of constants for every build: it can be held out by build


def x_melem(p: dict) -> float:
    return p["M"] * p["heads"] * p["head_dim"] / 1e6


def plain_points(base: Path) -> pd.DataFrame:
    """One row per plain-build measurement: source, run, M, heads, head_dim, block_n, build, T(us), E(us), O(us)."""
    rows = []
    for p in json.loads((base / STD_RECORD).read_text())["points"]:
        rows.append({"source": "std", "run": p["run"], **{k: int(p[k]) for k in R19.F.KEY if k in p},
                     "T": p["T_std"], "E": p["E_std"], "O": np.nan})
    rec = json.loads((base / RULE19_RECORD).read_text())
    for p in rec["points"]:
        rows.append({"source": "rule19", "run": rec["run"], "M": p["M"], "heads": p["heads"],
                     "head_dim": p["head_dim"], "block_n": p["block_n"], "T": p["E"]["fa_us"],
                     "E": p["E"]["median_us"], "O": p["O"]["median_us"]})
    rec = json.loads((base / RULE20_RECORD).read_text())
    for p in rec["posthoc"]["pooled_arms"]:
        mh, d, bn = p["point"].split()
        rows.append({"source": "rule20", "run": rec["run"], "M": int(mh.split(":")[0]), "heads": int(mh.split(":")[1]),
                     "head_dim": int(d[1:]), "block_n": int(bn[2:]), "T": p["fa_us"], "E": p["E_us"], "O": np.nan})
    f = pd.DataFrame(rows)
    f["build"] = [R19.build(r) for r in f.to_dict(orient="records")]
    f["X"] = [x_melem(r) for r in f.to_dict(orient="records")]
    return f


def form_rows(f: pd.DataFrame, form: str) -> pd.DataFrame:
    """The rows a form can use: hbm_offset needs a measured plain O."""
    return f[f["O"].notna()] if form == "hbm_offset" else f


def spec(form: str, forms: dict | None = None) -> tuple:
    """(inputs, signs, needs) of a form: from ``forms`` ({name: (inputs, signs, needs)}, a later rule's forms fitted
    by this machinery, e.g. ``fa_rule22.FORMS``) when it names it, else this rule's."""
    if forms and form in forms:
        return forms[form]
    return FORMS[form], SIGN[form], NEEDS[form]


def design(g: pd.DataFrame, form: str, forms: dict | None = None) -> tuple:
    """(A, y): the form's regressors (signs folded in) and its target."""
    inputs, signs, _ = spec(form, forms)
    A = np.column_stack([s * g[c].to_numpy(float) for c, s in zip(inputs, signs)])
    y = g["E"].to_numpy(float) - (g["O"].to_numpy(float) if form == "hbm_offset" else 0.0)
    return A, y


def group(f: pd.DataFrame, form: str) -> np.ndarray:
    """The constants' key per row: the build, or "all" for a pooled form."""
    return np.full(len(f), "all", dtype=object) if form in POOLED else f["build"].to_numpy()


def fit(f: pd.DataFrame, form: str, forms: dict | None = None) -> dict:
    """{build (or "all"): [coefficients]} by least squares per build (``FORMS`` order)."""
    out = {}
    for b, g in f.groupby(group(f, form)):
        A, y = design(g, form, forms)
        if len(g) >= A.shape[1]:
            out[b] = [float(c) for c in np.linalg.lstsq(A, y, rcond=None)[0]]
    return out


def predict(f: pd.DataFrame, form: str, coef: dict, forms: dict | None = None) -> np.ndarray:
    """The form's E per row; NaN where its build has no constants."""
    out = np.full(len(f), np.nan)
    for i, (r, b) in enumerate(zip(f.to_dict(orient="records"), group(f, form))):
        if b in coef:
            A, y = design(pd.DataFrame([r]), form, forms)
            out[i] = float(A[0] @ np.asarray(coef[b])) + (r["O"] if form == "hbm_offset" else 0.0)
    return out


def held_out(f: pd.DataFrame, form: str, by: str | None, forms: dict | None = None) -> np.ndarray:
    """Each row's prediction from the form fitted without it (``by`` None) or without its whole ``by`` group."""
    out = np.full(len(f), np.nan)
    groups = np.arange(len(f)) if by is None else f[by].to_numpy()
    for gval in pd.unique(groups):
        m = groups == gval
        out[m] = predict(f[m], form, fit(f[~m], form, forms), forms)
    return out


def share(pred, E) -> dict:
    ok = [bool(within(p, e)) for p, e in zip(pred, E) if np.isfinite(p)]
    err = [abs(p - e) for p, e in zip(pred, E) if np.isfinite(p)]
    return {"within": int(sum(ok)), "n": len(ok), "of": int(len(E)), "share": sum(ok) / len(ok) if ok else None,
            "median_abs_error_us": float(np.median(err)) if err else None}


def score_form(f: pd.DataFrame, form: str, forms: dict | None = None) -> dict:
    """A form's figures: in-sample, leave one point out (by build), leave one call out (by call), leave one build out
    (pooled forms), fitted without rule 19's points. ``forms``: a later rule's forms (``spec``)."""
    g = form_rows(f, form).reset_index(drop=True)
    coef = fit(g, form, forms)
    inputs, _, needs = spec(form, forms)
    loo = held_out(g, form, None, forms)
    res = {"inputs": inputs, "needs": needs, "points": int(len(g)), "coefficients": coef,
           "in_sample": share(predict(g, form, coef, forms), g["E"]),
           "leave_one_point_out": share(loo, g["E"])}
    res["leave_one_point_out"]["by_build"] = {b: share(loo[g["build"].to_numpy() == b], g[g["build"] == b]["E"])
                                              for b in sorted(g["build"].unique())}
    if g["run"].nunique() > 1:
        loco = held_out(g, form, "run", forms)
        res["leave_one_call_out"] = share(loco, g["E"])
        res["leave_one_call_out"]["by_call"] = {
            r: share(loco[g["run"].to_numpy() == r], g[g["run"] == r]["E"]) for r in g["run"].unique()}
    if form in POOLED:
        res["leave_one_build_out"] = share(held_out(g, form, "build", forms), g["E"])
    # every form on the 14 rule19 points, fitted without them: the nearest thing to a fresh call
    if form != "hbm_offset":
        r19 = g["source"] == "rule19"
        res["rule19_from_others"] = share(predict(g[r19], form, fit(g[~r19], form, forms), forms), g[r19]["E"])
    return res


def posthoc(base: Path) -> dict:
    f = plain_points(base)
    forms = {k: score_form(f, k) for k in FORMS}
    for k, v in forms.items():
        print(f"{k:<19} needs {v['needs']:<30} n {v['points']:>2}: in-sample "
              f"{v['in_sample']['within']}/{v['in_sample']['n']}, LOO {v['leave_one_point_out']['within']}/"
              f"{v['leave_one_point_out']['n']} (median |err| {v['leave_one_point_out']['median_abs_error_us']:.0f} us)"
              + (f", leave-one-call-out {v['leave_one_call_out']['within']}/{v['leave_one_call_out']['n']}"
                 if "leave_one_call_out" in v else "")
              + (f", leave-one-build-out {v['leave_one_build_out']['within']}/{v['leave_one_build_out']['n']}"
                 if "leave_one_build_out" in v else "")
              + (f", rule19 from the others {v['rule19_from_others']['within']}/{v['rule19_from_others']['n']}"
                 if "rule19_from_others" in v else ""))
    return {"what": "rule 21 post hoc: candidate rules for plain-build fused - FA-only fitted on the committed "
                    "plain-build records, in-sample and held-out within-band shares",
            "records": [STD_RECORD, RULE19_RECORD, RULE20_RECORD], "forms": forms,
            "points": f.round(3).to_dict(orient="records")}


FROZEN_FORM = "bytes_offset"


def freeze(base: Path) -> dict:
    """The chosen form's constants fitted on every committed plain-build point (the record under ``FROZEN``)."""
    f = plain_points(base)
    v = score_form(f, FROZEN_FORM)
    return {"what": "rule 21, frozen in session 14 (2026-12-04) before any device call scored it: plain-build "
                    "fused - FA-only of the split Triton kernel, E = a_b X - g_b T per build b",
            "rule": 21, "form": FROZEN_FORM,
            "formula": "E_us = a_b * X - g_b * T_us, X = M * heads * head_dim / 1e6, b = d{head_dim}-bn{block_n}, "
                       "T_us the FA-only plain build's median time (CUDA graph) at the point",
            "needs": NEEDS[FROZEN_FORM], "coefficients_order": ["a_b (us per million output elements)", "g_b"],
            "coefficients": v["coefficients"], "fitted_on": {"records": [STD_RECORD, RULE19_RECORD, RULE20_RECORD],
                                                            "points": v["points"]},
            "posthoc": {k: v[k] for k in ("in_sample", "leave_one_point_out", "leave_one_call_out",
                                          "rule19_from_others")},
            "criterion": "within max(20 us, 20 %) of E at every fresh point (sim.predict_link.within)",
            "preregistration": "attention-extra/rule21-preregistration.md"}


def frozen(base: Path) -> dict:
    return json.loads((base / FROZEN).read_text())


def rule21(p: dict, rule: dict) -> float:
    """The frozen rule's E (us) at point ``p`` (M, heads, head_dim, block_n, T(us), and O(us) if the form needs it)."""
    b = "all" if rule["form"] in POOLED else R19.build(p)
    if b not in rule["coefficients"]:
        raise InputError("build", b, f"has no frozen constants (have {sorted(rule['coefficients'])})")
    row = pd.DataFrame([{**p, "build": b, "X": x_melem(p), "O": p.get("O", np.nan), "E": 0.0}])
    return float(predict(row, rule["form"], rule["coefficients"])[0])


def read_plan(base: Path, plan: str) -> dict:
    """The plan (a path under data/, or absolute) with its points; an ``InputError`` names what is missing."""
    path = base / plan
    if not path.is_file():
        raise InputError("--plan", plan, "is not a file (a plan under data/, e.g. attention-extra/fa-rule21-plan.json)")
    q = json.loads(path.read_text())
    if not q.get("points"):
        raise InputError("--plan", plan, "has no points")
    return q


def read_run(base: Path, run: str) -> tuple:
    """(pairs, blocks, meta) of a run folder (under data/, or absolute) as ``benchmarks/gpu/fa_rule20.py`` writes it
    (``write_run``); meta {} where the folder has no rule20-meta.json."""
    folder = base / run
    if not (folder / "rule20-pairs.parquet").is_file() or not (folder / "rule20-blocks.parquet").is_file():
        raise InputError("--run", run, "has no rule20-pairs.parquet and rule20-blocks.parquet (a run folder of "
                                       "benchmarks/gpu/fa_rule20.py, under data/)")
    pairs, blocks, _ = R20.load_run(folder)
    if pairs.empty:
        raise InputError("--run", run, "has no timed pairs")
    meta = folder / "rule20-meta.json"
    return pairs, blocks, json.loads(meta.read_text()) if meta.is_file() else {}


def control(bt: pd.DataFrame) -> dict:
    """{point: the ``hbm`` control arm's blocks, O (median of block medians, us), F = var(block medians) /
    mean(SE_blk^2) (``fa_rule20.f_ratio``; NaN under 2 blocks), and whether F is under ``F_CONTROL``}."""
    out = {}
    for pt, g in bt[bt["arm"] == "hbm"].groupby("point", sort=False):
        F = R20.f_ratio(g["E_blk"], g["SE_blk"]) if len(g) >= 2 else float("nan")
        out[pt] = {"blocks": int(len(g)), "O_us": float(g["E_blk"].median()), "F": F,
                   "under": bool(np.isfinite(F) and F < F_CONTROL)}
    return out


def score(base: Path, run: str, plan: str | None = None) -> dict:
    """The frozen rule at every point of a run of ``benchmarks/gpu/fa_rule20.py`` (``rule20-pairs.parquet``,
    ``rule20-blocks.parquet``, ``rule20-meta.json``), with the pre-registration's three criteria
    (``rule21-preregistration.md``):

    - per point the blocks of every fused arm pooled (``fa_rule20.pooled_points``: E the median of block medians, T
      the FA-only launches' median); blocks of the ``hbm`` control arm are left out of E. The rule is met when it is
      within at every fresh point of the plan (status starting with "fresh"; a fresh point the run lacks counts as a
      miss); without a plan every point of the run is scored;
    - the instrument agrees with itself when both splits (alternate blocks in time order; first half against second)
      agree at >= 90 % of the plan's points (the run's, without a plan);
    - the control holds when the ``hbm`` arm's F (``control``) is under 2 at >= 80 % of them.

    ``run`` and ``plan`` are paths under ``base`` (data/), or absolute."""
    rule = frozen(base)
    q = None if plan is None else read_plan(base, plan)
    pairs, blocks, meta = read_run(base, run)
    bt = R20.block_table(pairs, blocks)
    ctl = control(bt)
    planned = None if q is None else [R20.label(x) for x in q["points"]]
    fresh = None if q is None else [R20.label(x) for x in q["points"] if str(x.get("status", "")).startswith("fresh")]
    pts = []
    for x in R20.pooled_points(bt[bt["arm"] != "hbm"]):
        mh, d, bn = x["point"].split()
        p = {"point": x["point"], "M": int(mh.split(":")[0]), "heads": int(mh.split(":")[1]),
             "head_dim": int(d[1:]), "block_n": int(bn[2:]), "T": x["fa_us"], "E": x["E_us"],
             "blocks": x["blocks"], "sd_blocks_us": x["sd_blocks_us"], "agree": x["agree"],
             "self_agree": bool(x["agree"]["both"]), "control": ctl.get(x["point"]),
             "fresh": fresh is None or x["point"] in fresh}
        p["rule21"] = rule21(p, rule)
        p["within"] = bool(within(p["rule21"], p["E"]))
        pts.append(p)
        c = p["control"]
        print(f"{p['point']:<20} T {p['T']:6.0f} E {p['E']:5.0f} ({p['blocks']} blocks, splits "
              f"{'agree' if p['self_agree'] else 'DISAGREE'}) rule21 {p['rule21']:5.0f}"
              f"{' within' if p['within'] else '       '}"
              + (f"  hbm {c['blocks']} blocks O {c['O_us']:.0f} F {c['F']:.2f}" if c else "  no hbm blocks"))
    n_points = len(pts) if planned is None else len(planned)
    missing = [] if planned is None else [x for x in planned if x not in {p["point"] for p in pts}]
    scored = [p for p in pts if p["fresh"]]
    n_fresh = len(scored) if fresh is None else len(fresh)
    n = sum(p["within"] for p in scored)
    met = n_fresh > 0 and n == n_fresh
    a = sum(p["self_agree"] for p in pts)
    ok = n_points > 0 and a >= SELF_AGREEMENT_SHARE * n_points
    c_under = sum(bool(p["control"] and p["control"]["under"]) for p in pts)
    c_ok = n_points > 0 and c_under >= CONTROL_SHARE * n_points
    checks = meta.get("checks", [])
    print(f"instrument: both splits agree at {a}/{n_points} ({'met' if ok else 'not met'}); control: hbm F under "
          f"{F_CONTROL:g} at {c_under}/{n_points} ({'met' if c_ok else 'not met'}); rule 21: {n}/{n_fresh} fresh "
          f"points within ({'MET' if met else 'not met'})" + (f"; missing from the run: {missing}" if missing else "")
          + (f"; checks {sum(bool(x.get('ok')) for x in checks)}/{len(checks)}" if meta else ""))
    return {"what": "rule 21 scored on a run of benchmarks/gpu/fa_rule20.py", "run": str(run), "frozen": FROZEN,
            "plan": None if plan is None else str(plan), "within": int(n), "n": n_fresh,
            "share": n / n_fresh if n_fresh else None, "met": met, "self_agree": int(a), "points_planned": n_points,
            "instrument_ok": ok, "control_under": int(c_under), "control_ok": c_ok, "missing": missing,
            "settings": meta.get("settings"), "rounds_done": meta.get("rounds_done"),
            "checks": {"rows": len(checks), "ok": sum(bool(x.get("ok")) for x in checks)} if meta else None,
            "points": pts}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("posthoc", "freeze", "score"))
    ap.add_argument("--run", help="with score: a run folder under data/ (or absolute) holding what "
                                  "benchmarks/gpu/fa_rule20.py writes")
    ap.add_argument("--plan", help="with score: the plan under data/ whose fresh points are scored "
                                   "(e.g. attention-extra/fa-rule21-plan.json); without it every point is")
    ap.add_argument("--out", help="write the record (.json); never over an existing file")
    args = ap.parse_args(argv)
    F.check_out(args.out)
    if args.action == "score" and not args.run:
        raise InputError("--run", None, "is needed with score")
    res = {"posthoc": posthoc, "freeze": freeze}[args.action](data_dir()) if args.action != "score" \
        else score(data_dir(), args.run, args.plan)
    F.write_record(args.out, res)
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_rule21.py")
