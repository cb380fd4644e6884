"""Checks shared by the persistent-FA4 prediction record tests (``benchmarks/predict_pers_fa4.py``'s records):
a verdict column is the predictor's answer under its rule, its ``_within`` flag the record's tolerance, and a
summary group counts its rows."""

import numpy as np
import pytest

from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel, predict_fa


def check_verdict_rows(rec: dict, column: str, rows, kernel_kw) -> None:
    """Each of ``rows``: ``<column>_E_res_us`` is ``predict_fa`` of ``kernel_kw(row)`` with the record's FA4 law,
    and ``<column>_within`` says whether that is within the record's tolerance of the measured residual."""
    p, law = load_platform(rec["platform"]), rec["laws"]["fa4"]
    for r in rows:
        got = predict_fa(FaKernel(**kernel_kw(r), exit_waits_for_drain=True, sm_store_GBps=law["r_sm_GBps"],
                                  shared_buffer_MiB=law["Q_eff_MiB"]), p)["E_res_us"]
        assert got == pytest.approx(r[f"{column}_E_res_us"], rel=1e-9)
        tol = max(rec["tolerance"]["abs_us"], rec["tolerance"]["rel"] * abs(r["measured_E_res_us"]))
        assert r[f"{column}_within"] == (abs(got - r["measured_E_res_us"]) <= tol)


def check_summary(rec: dict, column: str, group: str, rows) -> None:
    """``rec["summary"][group][column]`` counts ``rows``: within, n and the median |error|."""
    errors = [abs(r[f"{column}_E_res_us"] - r["measured_E_res_us"]) for r in rows]
    assert rec["summary"][group][column] == {
        "within": sum(r[f"{column}_within"] for r in rows), "n": len(rows),
        "median_abs_error_us": pytest.approx(float(np.median(errors)))}


def check_first_rule_columns(rec: dict, first: dict) -> None:
    """A later rule's record keeps the first record's laws, rows and first-rule columns unchanged."""
    assert rec["laws"] == first["laws"] and len(rec["rows"]) == len(first["rows"])
    for a, b in zip(rec["rows"], first["rows"]):
        assert (a["set"], a["M"], a["variant"], a["measured_E_res_us"]) == (b["set"], b["M"], b["variant"],
                                                                           b["measured_E_res_us"])
        for k in ("fa4_law", "triton_law", "one_stage", "sm_stage_moe", "fa4_law_offset0"):
            assert a[f"{k}_E_res_us"] == b[f"{k}_E_res_us"] and a[f"{k}_within"] == b[f"{k}_within"]
