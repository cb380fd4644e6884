"""Rule 21: the frozen plain-build rule loads and answers by its formula, its constants and the post hoc figures
recompute from the committed records (``benchmarks/fa_rule21.py``), and the held-out fit never sees the held-out
point."""

import json

import numpy as np
import pandas as pd
import pytest

from xstage.paths import data_dir

from .bench_scripts import load_script


@pytest.fixture(scope="module")
def R():
    return load_script("fa_rule21")


@pytest.fixture(scope="module")
def points(R):
    return R.plain_points(data_dir())


def test_plain_points_are_the_committed_records(points):
    assert points.groupby("source").size().to_dict() == {"rule19": 14, "rule20": 3, "std": 22}
    assert points["run"].nunique() == 6
    assert points["O"].notna().sum() == 14                      # only rule 19 measured the plain offset
    r = points[(points["source"] == "rule19") & (points["M"] == 57344) & (points["block_n"] == 64)].iloc[0]
    assert (r["heads"], r["head_dim"], round(r["E"]), round(r["O"]), round(r["T"])) == (4, 128, 404, -10, 14045)
    assert r["X"] == pytest.approx(57344 * 4 * 128 / 1e6)


def test_frozen_rule_loads_and_answers_by_its_formula(R):
    rule = R.frozen(data_dir())
    assert rule["form"] == "bytes_offset" and rule["rule"] == 21
    assert set(rule["coefficients"]) == {"d128-bn128", "d128-bn64", "d64-bn128", "d64-bn64"}
    a, g = rule["coefficients"]["d64-bn64"]
    p = {"M": 26624, "heads": 8, "head_dim": 64, "block_n": 64, "T": 4500.0}
    assert R.rule21(p, rule) == pytest.approx(a * 26624 * 8 * 64 / 1e6 - g * 4500.0)
    with pytest.raises(Exception, match="no frozen constants"):
        R.rule21({**p, "block_n": 32}, rule)


def test_frozen_constants_recompute_from_the_committed_records(R, points):
    rule = R.frozen(data_dir())
    coef = R.fit(points, rule["form"])
    for b, c in rule["coefficients"].items():
        assert coef[b] == pytest.approx(c, rel=1e-9)
    assert rule["fitted_on"]["points"] == 39


def test_posthoc_figures_recompute(R):
    rec = json.loads((data_dir() / "attention-extra/fa-rule21-posthoc-h200-pcie-host.json").read_text())
    now = R.posthoc(data_dir())
    got = {k: (v["in_sample"]["within"], v["leave_one_point_out"]["within"],
               v.get("leave_one_call_out", {}).get("within")) for k, v in now["forms"].items()}
    assert got == {"frac": (8, 6, 4), "bytes_offset": (19, 18, 15), "hbm_offset": (6, 4, None),
                   "bytes_offset_pooled": (7, 6, 8)}
    assert now["forms"]["bytes_offset_pooled"]["leave_one_build_out"]["within"] == 4
    for k, v in rec["forms"].items():
        assert v["leave_one_point_out"] == now["forms"][k]["leave_one_point_out"]


def test_held_out_prediction_does_not_use_the_point(R):
    # two points on E = 10 T exactly, a third far off: its held-out prediction comes from the other two only
    f = pd.DataFrame({"build": ["d64-bn64"] * 3, "T": [1.0, 2.0, 3.0], "E": [10.0, 20.0, 300.0], "X": 1.0,
                      "O": np.nan, "run": ["a", "a", "b"]})
    assert R.held_out(f, "frac", None)[2] == pytest.approx(30.0)
    assert R.held_out(f, "frac", "run")[2] == pytest.approx(30.0)
    # a build with no other point cannot be predicted: NaN, not counted
    assert np.isnan(R.held_out(f.assign(build=["d64-bn64", "d64-bn64", "d128-bn64"]), "frac", None)[2])
    assert R.share([np.nan, 30.0], [10.0, 31.0]) | {} == {"within": 1, "n": 1, "of": 2, "share": 1.0,
                                                          "median_abs_error_us": 1.0}


def test_score_reads_a_rule20_style_run(R):
    rec = R.score(data_dir(), "attention-runs/71a2b52-rule20")
    assert rec["n"] == 3 and rec["self_agree"] == 3 and rec["instrument_ok"]
    assert [round(p["E"]) for p in rec["points"]] == [4, 164, 68]
    assert rec["within"] == 0 and not rec["met"]               # in-sample points, and the rule misses them


def test_score_counts_only_the_plans_fresh_points(R):
    rec = R.score(data_dir(), "attention-runs/71a2b52-rule20", plan="attention-extra/fa-rule21-plan.json")
    # 45056:4 and 36864:6 are the plan's controls; its 8 fresh points are missing from that run: each counts as a miss
    assert rec["within"] == 0 and rec["n"] == 8 and not rec["met"] and len(rec["missing"]) == 8
    assert rec["points_planned"] == 10 and not rec["instrument_ok"] and rec["control_under"] == 0
    plan = json.loads((data_dir() / "attention-extra/fa-rule21-plan.json").read_text())
    fresh = [q for q in plan["points"] if q["status"] == "fresh"]
    assert len(fresh) == 8 and {R.R19.build(q) for q in fresh} == set(R.frozen(data_dir())["coefficients"])
    # no fresh M appears in any committed plain-build point
    assert not {q["M"] for q in fresh} & set(R.plain_points(data_dir())["M"])


def test_every_plan_point_is_a_valid_kernel_configuration():
    G = load_script("fa_rule19", "gpu", "fa_rule19_gpu")
    plan = json.loads((data_dir() / "attention-extra/fa-rule21-plan.json").read_text())
    for q in plan["points"]:
        cfg = G.point_config(q)
        assert (cfg.seq_len, cfg.heads, cfg.head_dim, cfg.block_n) == (q["M"], q["heads"], q["head_dim"], q["block_n"])
