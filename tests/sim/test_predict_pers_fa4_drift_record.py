"""The persistent-FA4 drift record: its verdict column is the predictor's answer under the third rule (persistent
programs spread at the Triton FA-only kernel's tile-log drift, stock FA4 none), and every earlier rule's column
equals the first record's (the drift changed no other prediction)."""

import json

import numpy as np
import pytest

from xstage.paths import data_dir
from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel, predict_fa

DIR = data_dir() / "predictions"
RECORD = DIR / "fa4-persistent-drift-h200-pcie-host.json"
FIRST = DIR / "fa4-persistent-heldout-h200-pcie-host.json"
LAWS = DIR / "fa-heldout-v2-h200-pcie-host.json"


def test_verdict_rows_are_the_predictors_answers_under_the_drift_rule():
    rec = json.loads(RECORD.read_text())
    assert rec["verdict_key"] == "fa4_law_drift"
    s = json.loads(LAWS.read_text())["tile_spreads"]["fa"]
    assert rec["program_spread_persistent"] == s
    p, law = load_platform(rec["platform"]), rec["laws"]["fa4"]
    for r in rec["rows"][::3]:
        sp = s if r["kind"] == "persistent" else 0.0
        assert r["program_spread"] == sp
        got = predict_fa(FaKernel(**r["kw"], exit_waits_for_drain=True, sm_store_GBps=law["r_sm_GBps"],
                                  shared_buffer_MiB=law["Q_eff_MiB"], program_spread=sp, fa_program_spread=sp),
                         p)["E_res_us"]
        assert got == pytest.approx(r["fa4_law_drift_E_res_us"], rel=1e-9)
        tol = max(rec["tolerance"]["abs_us"], rec["tolerance"]["rel"] * abs(r["measured_E_res_us"]))
        assert r["fa4_law_drift_within"] == (abs(got - r["measured_E_res_us"]) <= tol)
    persistent = [r for r in rec["rows"] if r["kind"] == "persistent"]
    errors = [abs(r["fa4_law_drift_E_res_us"] - r["measured_E_res_us"]) for r in persistent]
    assert rec["summary"]["all persistent"]["fa4_law_drift"] == {
        "within": sum(r["fa4_law_drift_within"] for r in persistent), "n": len(persistent),
        "median_abs_error_us": pytest.approx(float(np.median(errors)))}


def test_earlier_rule_columns_are_the_first_records():
    rec, first = json.loads(RECORD.read_text()), json.loads(FIRST.read_text())
    assert rec["laws"] == first["laws"] and len(rec["rows"]) == len(first["rows"])
    for a, b in zip(rec["rows"], first["rows"]):
        assert (a["set"], a["M"], a["variant"], a["measured_E_res_us"]) == (b["set"], b["M"], b["variant"],
                                                                           b["measured_E_res_us"])
        for k in ("fa4_law", "triton_law", "one_stage", "sm_stage_moe", "fa4_law_offset0"):
            assert a[f"{k}_E_res_us"] == b[f"{k}_E_res_us"] and a[f"{k}_within"] == b[f"{k}_within"]
