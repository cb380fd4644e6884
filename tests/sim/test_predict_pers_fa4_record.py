"""The persistent-FA4 held-out record reloads, its rows are the predictor's answers under its rule, and its laws
are fa-heldout-v2's (nothing refitted on these runs)."""

import json

import numpy as np
import pytest

from xstage.paths import data_dir
from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel, predict_fa

RECORD = data_dir() / "predictions" / "fa4-persistent-heldout-h200-pcie-host.json"


def test_rows_are_the_predictors_answers_with_the_fa4_law():
    rec = json.loads(RECORD.read_text())
    p = load_platform(rec["platform"])
    law = rec["laws"]["fa4"]
    for r in rec["rows"][::5]:
        got = predict_fa(FaKernel(**r["kw"], exit_waits_for_drain=True, sm_store_GBps=law["r_sm_GBps"],
                                  shared_buffer_MiB=law["Q_eff_MiB"]), p)["E_res_us"]
        assert got == pytest.approx(r["fa4_law_E_res_us"], rel=1e-9)
        tol = max(rec["tolerance"]["abs_us"], rec["tolerance"]["rel"] * abs(r["measured_E_res_us"]))
        assert r["fa4_law_within"] == (abs(got - r["measured_E_res_us"]) <= tol)


def test_laws_are_the_recorded_fit_and_the_rule_holds():
    rec = json.loads(RECORD.read_text())
    v2 = json.loads((data_dir() / rec["laws_from"]).read_text())
    assert rec["laws"] == {fam: v2["laws"][fam] for fam in ("fa4", "triton")}
    for r in rec["rows"]:
        if r["kind"] == "persistent":
            stagger = "stagger" in r["kernel"]
            assert (r["kw"]["send"], r["kw"]["send_step_offset"]) == (("stagger", 1) if stagger else ("tile_end", 0))
            assert (r["kw"]["order"] == "local_last") == ("ll" in r["kernel"])
    persistent = [r for r in rec["rows"] if r["kind"] == "persistent"]
    errors = [abs(r["fa4_law_E_res_us"] - r["measured_E_res_us"]) for r in persistent]
    assert rec["summary"]["all persistent"]["fa4_law"] == {
        "within": sum(r["fa4_law_within"] for r in persistent), "n": len(persistent),
        "median_abs_error_us": pytest.approx(float(np.median(errors)))}
