"""``xstage results attention``: the committed predictions beside the FA4 rows (issue 16)."""

import json

import pytest

from xstage.compare.attention_records import FA4_FOLDER, PREDICTIONS, fa4_rows, summarize, with_predictions
from xstage.paths import data_dir


def _fa4(rows):
    return {(r["run"], r["M"]): r for r in rows if r.get("fa_core") == "fa4"}


def _nan_equal(row):
    """NaN (a run without some variant, e.g. pers6a's pipelined_best_us) compared as equal to NaN."""
    return {k: "nan" if isinstance(v, float) and v != v else v for k, v in row.items()}


def test_predicted_beside_measured_and_nothing_else_changed():
    rows = _fa4(summarize(data_dir()))
    bare = _fa4(fa4_rows(data_dir() / FA4_FOLDER))
    assert rows.keys() == bare.keys()
    new = ("e_res_predicted_", "prediction_")
    for k, r in rows.items():
        assert _nan_equal({a: b for a, b in r.items() if not a.startswith(new)}) == _nan_equal(bare[k])  # unchanged
    pers = json.loads((data_dir() / PREDICTIONS[1][0]).read_text())
    want = next(r for r in pers["rows"] if r["set"] == "attention-fa4/pers5b" and r["M"] == 65536
                and r["variant"] == "fused_vmm_pers_staggerll")
    r = rows[("pers5b", 65536)]
    assert r["e_res_predicted_vmm_pers_staggerll_us"] == want["fa4_law_E_res_us"]
    assert r["e_res_own_paired_vmm_pers_staggerll_us"] == pytest.approx(want["measured_E_res_us"], abs=1e-6)
    assert (r["prediction_record"], r["prediction_column"], r["prediction_held_out"]) == (PREDICTIONS[1][0], "fa4_law", True)
    assert rows[("run1", 8192)]["prediction_held_out"] is False      # the FA4 law was fitted on run1 at 8K
    assert rows[("rep", 8192)]["prediction_held_out"] is True
    assert rows[("rep", 65536)]["e_res_predicted_vmm_us"] == pytest.approx(355, abs=1)
    for k in (("pers1", 8192), ("pers3", 65536)):                      # no record predicted these runs
        assert not any(a.startswith(new) for a in rows[k])


def test_a_record_adds_only_its_run_and_platform(tmp_path):
    (tmp_path / "predictions").mkdir()
    rec = {"platform": "p1", "rows": [{"set": "attention-fa4/a", "M": 8, "variant": "fused_x", "law_E_res_us": 5.0},
                                      {"set": "attention-fa4/a", "M": 8, "variant": "fa4", "law_E_res_us": 1.0}]}
    (tmp_path / "predictions" / "r.json").write_text(json.dumps(rec))
    rows = [{"records": "attention-fa4/a", "platform": "p1", "M": 8}, {"records": "attention-fa4/a", "platform": "p2", "M": 8},
            {"records": "attention-fa4/a", "platform": "p1", "M": 16}, {"records": "attention-fa4/b", "platform": "p1", "M": 8}]
    out = with_predictions(rows, tmp_path, records=(("predictions/r.json", "law"), ("predictions/missing.json", "x")))
    assert out[0] == {**rows[0], "e_res_predicted_x_us": 5.0, "prediction_record": "predictions/r.json",
                      "prediction_column": "law", "prediction_held_out": True}
    assert out[1:] == rows[1:]


def test_split_kernels_get_the_fourth_rules_prediction():
    rows = _fa4(summarize(data_dir()))
    path, column = PREDICTIONS[2]
    assert column == "fa4_law_split"
    rec = json.loads((data_dir() / path).read_text())
    for run in ("pers6a", "pers6", "pers6b"):
        for M in ((16384,) if run == "pers6a" else (8192, 16384, 32768, 65536)):
            r = rows[(run, M)]
            assert (r["prediction_record"], r["prediction_column"], r["prediction_held_out"]) == (path, column, True)
            want = {x["variant"]: x for x in rec["rows"] if x["set"] == f"attention-fa4/{run}" and x["M"] == M}
            assert {f"e_res_predicted_{v[len('fused_'):]}_us" for v in want} == \
                {k for k in r if k.startswith("e_res_predicted_")}
            for v, x in want.items():
                tag = v[len("fused_"):]
                assert r[f"e_res_predicted_{tag}_us"] == x["fa4_law_split_E_res_us"]
                assert r[f"e_res_own_paired_{tag}_us"] == pytest.approx(x["measured_E_res_us"], abs=1e-6)


def test_pers8_gets_the_fifth_rules_held_out_prediction():
    """pers8 (run after the fifth rule's commit) carries that rule's answers, marked held out, for all six kernels."""
    rows = _fa4(summarize(data_dir()))
    path, column = PREDICTIONS[3]
    assert column == "fa4_law_drift_measured"
    rec = json.loads((data_dir() / path).read_text())
    for M in (8192, 16384, 32768, 65536):
        r = rows[("pers8", M)]
        assert (r["prediction_record"], r["prediction_column"], r["prediction_held_out"]) == (path, column, True)
        want = {x["variant"]: x for x in rec["rows"] if x["set"] == "attention-fa4/pers8" and x["M"] == M}
        assert len(want) == 6
        for v, x in want.items():
            tag = v[len("fused_"):]
            assert r[f"e_res_predicted_{tag}_us"] == x["fa4_law_drift_measured_E_res_us"]
            assert r[f"e_res_own_paired_{tag}_us"] == pytest.approx(x["measured_E_res_us"], abs=1e-6)


def test_pers9_gets_the_sixth_rule_and_the_fifth_beside_it():
    """pers9 (M = 12K, 24K, 48K, run after both rules were pre-registered) carries the sixth rule's answers as the
    prediction and the fifth rule's as ``e_res_predicted_by_rule5_*``, held out; the earlier runs' keys are as they were."""
    rows = _fa4(summarize(data_dir()))
    path, column, also = PREDICTIONS[4]
    assert (column, also) == ("rule6_congestion", ("rule5",))
    rec = json.loads((data_dir() / path).read_text())
    for M, n in ((12288, 2), (24576, 7), (49152, 7)):
        r = rows[("pers9", M)]
        assert (r["prediction_record"], r["prediction_column"], r["prediction_held_out"]) == (path, column, True)
        want = {x["variant"]: x for x in rec["rows"] if x["set"] == "attention-fa4/pers9" and x["M"] == M}
        assert len(want) == n
        for v, x in want.items():
            tag = v[len("fused_"):]
            assert r[f"e_res_predicted_{tag}_us"] == x["rule6_congestion_E_res_us"]
            assert r[f"e_res_predicted_by_rule5_{tag}_us"] == x["rule5_E_res_us"]
    assert not any(k.startswith("e_res_predicted_by_") for (run, _), r in rows.items() if run not in ("pers9", "pers10", "pers11", "h100-pers12", "h100-pers12-a", "h100-pers12-b", "pers12", "pers12-b")
                   for k in r)


def test_pers10_gets_the_seventh_rule_and_the_fifth_and_sixth_beside_it():
    """pers10 (M = 20K-60K, run after the seventh rule was pre-registered) carries the seventh rule's answers as the
    prediction, the fifth and sixth rules' as ``e_res_predicted_by_rule5_*`` / ``..._by_rule6_congestion_*``, held out."""
    rows = _fa4(summarize(data_dir()))
    path, column, also = PREDICTIONS[5]
    assert (column, also) == ("rule7", ("rule5", "rule6_congestion"))
    rec = json.loads((data_dir() / path).read_text())
    assert rec["mode"] == "judged" and rec["summary"]["all"]["rule7"]["n"] == 20
    for M, n in ((20480, 2), (28672, 2), (40960, 7), (57344, 7), (61440, 2)):
        r = rows[("pers10", M)]
        assert (r["prediction_record"], r["prediction_column"], r["prediction_held_out"]) == (path, column, True)
        want = {x["variant"]: x for x in rec["rows"] if x["set"] == "attention-fa4/pers10" and x["M"] == M}
        assert len(want) == n
        for v, x in want.items():
            tag = v[len("fused_"):]
            assert r[f"e_res_predicted_{tag}_us"] == x["rule7_E_res_us"]
            assert r[f"e_res_predicted_by_rule5_{tag}_us"] == x["rule5_E_res_us"]
            assert r[f"e_res_predicted_by_rule6_congestion_{tag}_us"] == x["rule6_congestion_E_res_us"]


def test_pers11_gets_the_seventh_rule_out_of_sample():
    """pers11 (session 21, the default sweep on another H200, at M the seventh rule was fitted at but on no row of
    this run) carries the seventh rule's answers, held out, with the fifth and sixth beside them."""
    rows = _fa4(summarize(data_dir()))
    path, column, also = PREDICTIONS[6]
    assert (path, column, also) == ("predictions/fa-rule7-pers11-h200-pcie-host.json", "rule7",
                                    ("rule5", "rule6_congestion"))
    rec = json.loads((data_dir() / path).read_text())
    mine = [x for x in rec["rows"] if x["set"] == "attention-fa4/pers11"]
    assert len(mine) == 20
    for M in sorted({x["M"] for x in mine}):
        r = rows[("pers11", M)]
        assert (r["prediction_record"], r["prediction_column"], r["prediction_held_out"]) == (path, column, True)
        for x in (x for x in mine if x["M"] == M):
            tag = x["variant"][len("fused_"):]
            assert r[f"e_res_predicted_{tag}_us"] == x["rule7_E_res_us"]
            assert r[f"e_res_predicted_by_rule6_congestion_{tag}_us"] == x["rule6_congestion_E_res_us"]


@pytest.mark.parametrize("run,index", [("h100-pers12", 7), ("h100-pers12-a", 8), ("h100-pers12-b", 9)])
def test_the_h100_sweeps_get_the_seventh_rule_on_their_own_platform(run, index):
    """The H100 sweeps (session 23) carry the seventh rule's pre-registered answers, keyed by the rows' platform
    (h100-pcie-host: the benches name rows after the GPU), held out."""
    rows = _fa4(summarize(data_dir()))
    path, column, also = PREDICTIONS[index]
    assert (path, column, also) == (f"predictions/fa-rule7-{run}-h100-pcie-host.json", "rule7", ("rule5", "rule6_congestion"))
    rec = json.loads((data_dir() / path).read_text())
    assert rec["platform"] == "h100-pcie-host"
    mine = [x for x in rec["rows"] if x["set"] == f"attention-fa4/{run}"]
    assert len(mine) == (5 if run.endswith("-b") else 20)
    for M in sorted({x["M"] for x in mine}):
        r = rows[(run, M)]
        assert r["platform"] == "h100-pcie-host"
        assert (r["prediction_record"], r["prediction_column"], r["prediction_held_out"]) == (path, column, True)
        for x in (x for x in mine if x["M"] == M):
            assert r[f"e_res_predicted_{x['variant'][len('fused_'):]}_us"] == x["rule7_E_res_us"]


@pytest.mark.parametrize("run,index,n", [("pers12", 10, 20), ("pers12-b", 11, 5)])
def test_the_session23_h200_sweeps_get_the_seventh_rule(run, index, n):
    rows = _fa4(summarize(data_dir()))
    path, column, _ = PREDICTIONS[index]
    assert path == f"predictions/fa-rule7-{run}-h200-pcie-host.json" and column == "rule7"
    mine = [x for x in json.loads((data_dir() / path).read_text())["rows"] if x["set"] == f"attention-fa4/{run}"]
    assert len(mine) == n
    for x in mine:
        r = rows[(run, x["M"])]
        assert r["platform"] == "h200-pcie-host" and r["prediction_held_out"] is True
        assert r[f"e_res_predicted_{x['variant'][len('fused_'):]}_us"] == x["rule7_E_res_us"]
