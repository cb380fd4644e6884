"""The library rate from quack timed in the fused run itself (``bench --quack``: the ``quack_grouped_mm`` variant)."""

import json

import pandas as pd
import pytest

from xstage.compare.moe_library import library_ratios, library_summary, load_library_runs


def test_same_run_quack_wins_over_a_separate_run(tmp_path):
    d = tmp_path / "quack-a"
    d.mkdir()
    d.joinpath("quack.json").write_text(json.dumps({"provenance": {"date": "2026-12-01"}, "rows": [
        {"config": "own", "torch(us)": 100.0, "quack(us)": 50.0, "ok": True},
        {"config": "old", "torch(us)": 100.0, "quack(us)": 90.0, "ok": True}]}))
    c = pd.DataFrame({"config": ["own", "old", "torch_wins", "none"], "gemm_vs_grouped_mm": [1.0, 1.0, 0.95, 0.5],
                      "grouped_mm(us)": [100.0, 100.0, 100.0, 100.0],
                      "quack_grouped_mm(us)": [80.0, float("nan"), 120.0, float("nan")], "precision": ["bf16"] * 4})
    r = library_ratios(c, load_library_runs(tmp_path))
    assert r.loc["own", "gemm_vs_library"] == pytest.approx(0.8) and bool(r.loc["own", "library_same_run"])
    assert r.loc["old", "gemm_vs_library"] == pytest.approx(0.9) and not r.loc["old", "library_same_run"]
    assert r.loc["torch_wins", "faster_library"] == "torch" and r.loc["torch_wins", "gemm_vs_library"] == 0.95
    assert "none" not in r.index          # no quack time anywhere: not judged against the library
    s = library_summary(c, tmp_path)
    assert s["library_n_configs"] == 3 and s["library_same_run"] == 2 and s["library_under_0p9"] == 1
    assert s["gemm_tflops_vs_library_min"] == pytest.approx(0.8) and s["library_worst_config"] == "own"


def test_same_run_alone_needs_no_separate_library_run(tmp_path):
    c = pd.DataFrame({"config": ["a"], "gemm_vs_grouped_mm": [0.9], "grouped_mm(us)": [100.0],
                      "quack_grouped_mm(us)": [90.0], "precision": ["bf16"]})
    s = library_summary(c, tmp_path)
    assert s["gemm_tflops_vs_library"] == pytest.approx(0.81) and s["library_same_run"] == 1
