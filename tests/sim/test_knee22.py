"""knee22 (issue 15, session 15): ``benchmarks/calib_knee22.py``: trim-all is the product's fit on a fit half where no
plateau point lies over 1.3x the issue law, the survey's lockq rows on fresh12 are knee21's committed figures, and
the verdict and decision follow the rule written in docs/calibration/knee22.md before any survey fit."""
import json
from pathlib import Path

import pytest

from .bench_scripts import load_script

k22 = load_script("calib_knee22")
EXTRA = Path(__file__).resolve().parents[2] / "data" / "calibration-extra"
RECORD = EXTRA / "knee22-posthoc.json"


def _points(target, grid):
    return k22.load_points(k22.folder(target, grid))[0].reset_index(drop=True)


def test_folders_and_splits_are_the_pages():
    assert k22.folder("host", "default").parts[-2:] == ("calibration", "h200-pcie-host")
    assert k22.folder("local", "fresh12").name == "h200-local-fresh12"
    assert all((k22.folder(t, g) / "points.parquet").is_file() for t, gs in k22.GRIDS.items() for g in gs)
    labels = [lab for lab, _ in k22.splits(_points("host", "aligned"), "host", "aligned", "two-stage-gated")]
    assert labels == ["pairs seed 0"]                   # nothing recorded: pairs seed 0, as calib_issue_law does
    p = _points("host", "fresh12-r2")
    assert [lab for lab, _ in k22.splits(p, "host", "fresh12-r2", "two-stage-lockq")] == \
        ["recorded"] + [f"bracket seed {s}" for s in range(5)]
    assert [lab for lab, _ in k22.splits(p, "host", "fresh12-r2", "two-stage-gated2")] == \
        ["recorded"] + [f"bracket seed {s}" for s in range(3)]


def _f(t_med, t_p90, p_med=0.01, p_p90=0.02):
    r = dict(zip(k22.FIGS, (t_med, t_p90, p_med, p_p90)))
    return {**r, "all_four": t_med <= 0.05 and t_p90 <= 0.15 and p_med <= 0.05 and p_p90 <= 0.15}


def test_verdict_is_the_pages():
    assert k22.verdict(_f(0.03, 0.10), _f(0.03, 0.10)) == "same"
    assert k22.verdict(_f(0.03, 0.10), _f(0.035, 0.109)) == "same"           # within a point
    assert k22.verdict(_f(0.03, 0.10), _f(0.03, 0.111)) == "worse"           # p90 over a point worse
    assert k22.verdict(_f(0.03, 0.10), _f(0.03, 0.10, p_p90=0.031)) == "worse"   # the period counts too
    assert k22.verdict(_f(0.03, 0.145), _f(0.03, 0.152)) == "worse"          # all four lost within a point
    assert k22.verdict(_f(0.06, 0.30), _f(0.04, 0.30)) == "better"
    assert k22.verdict(_f(0.03, 0.155), _f(0.03, 0.149)) == "better"         # all four gained within a point
    assert k22.verdict(_f(0.06, 0.30), _f(0.04, 0.32)) == "worse"            # better and worse: worse


def test_decide_applies_the_written_rule():
    rows = [{"target": "host", "grid": "g", "model": m, "split": "recorded", "verdict": v}
            for m, v in (("a", "same"), ("a", "better"), ("b", "same"))] + \
        [{"target": "local", "grid": "h", "model": "b", "split": "recorded", "error": "InputError"}]
    d = k22.decide(rows)
    assert d["recommend_trim_all"] is True and d["better"] == ["host g a recorded"] and d["worse"] == []
    assert d["errors"] == ["local h b recorded"] and d["per_model"]["b"] == {"worse": 0, "better": 0, "same": 1}
    assert k22.decide(rows + [{**rows[0], "verdict": "worse"}])["recommend_trim_all"] is False
    assert k22.decide(rows[:1])["recommend_trim_all"] is False              # never better: not recommended


def test_trim_all_is_the_product_where_no_plateau_point_lies_over_the_law():
    p = _points("local", "fresh12")                   # lockq's law on local fresh12's recorded fit half: none over 1.3x
    label, split = k22.splits(p, "local", "fresh12", "two-stage-lockq")[0]
    r = k22.survey_row(p, split, target="local", grid="fresh12", model="two-stage-lockq", label=label)
    assert r["n_over_product_law"] == 0 and r["n_withheld"] == 0 and r["refits"] == 0
    assert r["trim_all"] == r["product"] and r["verdict"] == "same"


def test_survey_lockq_rows_on_fresh12_are_knee21s():
    p = _points("host", "fresh12")
    split = dict(k22.splits(p, "host", "fresh12", "two-stage-lockq"))["bracket seed 3"]
    r = k22.survey_row(p, split, target="host", grid="fresh12", model="two-stage-lockq", label="bracket seed 3")
    want = {w["candidate"]: w for w in json.loads((EXTRA / "knee21-posthoc.json").read_text())["rows"]
            if (w["grid"], w["seed"], w["fitted_on"], w["judged_on"]) == ("fresh12", 3, "c", "c")}
    for ours, theirs in (("product", "lockq"), ("trim_all", "trim-all")):
        for k in k22.FIGS:
            assert r[ours][k] == pytest.approx(want[theirs][f"heldout_{k}"], abs=1e-12), (ours, k)
        assert r[ours]["misses"] == want[theirs]["misses"]
    assert r["withheld"] == want["trim-all"]["withheld"] and r["kept_over"] == [[17, 160, 38.272]]


@pytest.mark.skipif(not RECORD.is_file(), reason="the survey's record is not committed yet")
def test_the_record_agrees_with_knee21_and_with_itself():
    rec = json.loads(RECORD.read_text())
    want = {(w["candidate"], w["fitted_on"], w["seed"]): w for w in json.loads(
        (EXTRA / "knee21-posthoc.json").read_text())["rows"] if w["grid"] == "fresh12" and w["candidate"] != "repeat-median"}
    rows = [r for r in rec["rows"] if r["model"] == "two-stage-lockq" and r["target"] == "host"
            and r["grid"] in ("fresh12", "fresh12-r2") and r["split"].startswith("bracket")]
    assert len(rows) == 10
    for r in rows:
        run, seed = ("c" if r["grid"] == "fresh12" else "r2"), int(r["split"].split()[-1])
        for ours, theirs in (("product", "lockq"), ("trim_all", "trim-all")):
            for k in k22.FIGS:
                assert r[ours][k] == pytest.approx(want[(theirs, run, seed)][f"heldout_{k}"], abs=1e-12)
    for r in rec["rows"]:                               # nothing over the law: trim-all is the product
        if "verdict" in r and r["n_over_product_law"] == 0:
            assert r["trim_all"] == r["product"] and r["verdict"] == "same"
    assert rec["decision"] == k22.decide(rec["rows"])
