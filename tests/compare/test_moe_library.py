"""The library rate: the faster of torch._grouped_mm and quack, on the fused run's clock."""

import json

import pandas as pd
import pytest

from xstage.compare.moe_library import library_ratios, library_summary, load_library_runs


def _run(folder, name, date, rows):
    d = folder / name
    d.mkdir(parents=True)
    (d / "quack.json").write_text(json.dumps({"provenance": {"date": date, "git_commit": name}, "rows": rows}))


def _row(config, torch_us, quack_us, ok=True):
    return {"config": config, "torch(us)": torch_us, "quack(us)": quack_us, "ok": ok, "tuned": False}


def test_newest_run_wins_and_failed_rows_are_left_out(tmp_path):
    _run(tmp_path, "quack-a", "2026-12-01T10:00:00+00:00", [_row("c1", 100.0, 90.0), _row("c2", 100.0, 50.0, ok=False)])
    _run(tmp_path, "quack-b", "2026-12-01T11:00:00+00:00", [_row("c1", 100.0, 80.0)])
    lib = load_library_runs(tmp_path)
    assert list(lib.index) == ["c1"] and lib.loc["c1", "quack_over_torch"] == pytest.approx(0.8)


def test_ratio_is_scaled_only_where_quack_is_faster(tmp_path):
    _run(tmp_path, "quack-a", "2026-12-01T10:00:00+00:00", [_row("fast", 100.0, 80.0), _row("slow", 100.0, 125.0)])
    c = pd.DataFrame({"config": ["fast", "slow", "w8"], "gemm_vs_grouped_mm": [0.95, 0.90, 0.80],
                      "precision": ["bf16", "bf16", "w8a8"]})
    r = library_ratios(c, load_library_runs(tmp_path))
    assert r.loc["fast", "gemm_vs_library"] == pytest.approx(0.95 * 0.8) and r.loc["fast", "faster_library"] == "quack"
    assert r.loc["slow", "gemm_vs_library"] == pytest.approx(0.90) and r.loc["slow", "faster_library"] == "torch"
    s = library_summary(c, tmp_path)
    assert s["gemm_tflops_vs_library_min"] == pytest.approx(0.76) and s["library_n_configs"] == 2
    assert s["library_quack_faster"] == 1 and s["library_worst_config"] == "fast"
    assert s["gemm_tflops_vs_library"] == pytest.approx((0.76 * 0.90) ** 0.5)


def test_no_library_run_adds_no_keys(tmp_path):
    c = pd.DataFrame({"config": ["a"], "gemm_vs_grouped_mm": [0.9], "precision": ["bf16"]})
    assert library_summary(c, tmp_path) == {}
