"""The committed held-out FA record reloads and its predictions are the predictor's (no stale figures)."""

import json

import pytest

from xstage.paths import data_dir
from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel, predict_fa

RECORD = data_dir() / "predictions" / "fa-heldout-v2-h200-pcie-host.json"


def test_record_rows_are_the_predictors_answers():
    rec = json.loads(RECORD.read_text())
    p = load_platform(rec["platform"])
    assert {r["half"] for r in rec["rows"]} == {"fit", "held-out"}
    for r in rec["rows"][::7]:
        law = rec["laws"][r["kernel"]]
        kw = dict(r["kw"], **{k: v for k, v in r.get("structure", {}).items()
                              if k not in ("program_spread", "fa_program_spread")})
        got = predict_fa(FaKernel(**kw, exit_waits_for_drain=True, sm_store_GBps=law["r_sm_GBps"],
                                  shared_buffer_MiB=law["Q_eff_MiB"]), p)["E_res_us"]
        assert got == pytest.approx(r["fitted_E_res_us"], rel=1e-9)
        tol = max(rec["tolerance"]["abs_us"], rec["tolerance"]["rel"] * abs(r["measured_E_res_us"]))
        assert r["fitted_within"] == (abs(got - r["measured_E_res_us"]) <= tol)


def test_laws_were_fitted_on_fit_rows_only():
    rec = json.loads(RECORD.read_text())
    for fam, law in rec["laws"].items():
        fit = [r for r in rec["rows"] if r["kernel"] == fam and r["half"] == "fit"]
        assert law["fit_n"] == len(fit) > 0
        assert law["fit_within"] == sum(r["fitted_within"] for r in fit)
