"""Attention records: kernel rows, tile rows, the per-M summary and ``xstage results attention``."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.records import COLUMNS, load_records, save_records

from xstage.hw.attention.config import AttentionConfig
from xstage.compare.attention_records import summarize, summary_rows
from xstage.records.attention import kernel_row, tile_frame


def _cfg(M=8192):
    return AttentionConfig(M, heads=3, head_dim=128, world_size=8)


def _rows(M, times):
    return [kernel_row(_cfg(M), variant, [t, t + 2.0, t - 2.0]) for variant, t in times.items()]


TIMES = {"fa": 100.0, "serial": 150.0, "fused": 105.0, "serial_best": 160.0, "sdpa": 90.0, "a2a": 45.0}


def test_kernel_row_median_and_throughput():
    row = kernel_row(_cfg(), "fa", [3.0, 1.0, 2.0])
    assert row["time(us)"] == 2.0 and row["trials"] == 3 and row["time_min(us)"] == 1.0
    assert row["compute(TFLOPs)"] == pytest.approx(4 * 8192**2 * 128 * 3 / 2.0 / 1e6)
    assert row["bytes_remote"] == 8192 * 3 * 128 * 2 * 7 // 8
    assert set(COLUMNS["kernel"]) <= set(row)
    with pytest.raises(InputError):
        kernel_row(_cfg(), "fa", [])


def test_summary_pins_hiding_ratio_and_speedups():
    (row,) = summary_rows(pd.DataFrame(_rows(8192, TIMES)))
    assert row["M"] == 8192 and row["fa_us"] == 100.0 and row["fused_us"] == 105.0
    assert row["e_res_us"] == pytest.approx(5.0)
    assert row["hiding_ratio"] == pytest.approx(1 - 5 / 50)
    assert row["speedup_vs_serial"] == pytest.approx(150 / 105)
    assert row["speedup_vs_serial_best"] == pytest.approx(160 / 105)
    assert row["fa_vs_sdpa"] == pytest.approx(0.9)
    assert row["fa_tflops"] == pytest.approx(4 * 8192**2 * 128 * 3 / 100 / 1e6)
    assert math.isnan(row["ce_us"])


def test_summary_paired_residual_and_hiding_ratio():
    (row,) = summary_rows(pd.DataFrame(_rows(8192, TIMES)))
    assert "e_res_paired_us" not in row  # runs without the matched pairs
    paired = {"fused": 3.0, "serial": 60.0, "fused_hbm": 1.0}
    rows = [{**r, "paired_minus_fa(us)": paired.get(r["variant"], float("nan"))} for r in _rows(8192, {
        **TIMES, "fused_hbm": 101.0})]
    (row,) = summary_rows(pd.DataFrame(rows))
    assert row["e_res_paired_us"] == 3.0 and row["e_res_paired_hbm_us"] == 1.0
    assert row["hiding_ratio_paired"] == pytest.approx(1 - 3 / 60)
    assert row["hiding_ratio"] == pytest.approx(1 - 5 / 50)  # the medians' version is unchanged


def test_tile_frame_from_a_log():
    cfg = AttentionConfig(1024, heads=1, head_dim=64, world_size=2, block_m=128)
    n = cfg.layout.num_tiles
    log = np.zeros((n, 8), dtype=np.int64)
    base = 10**12
    log[:, 0] = np.arange(n) % 4
    log[:, 1] = log[:, 0] + 100
    log[:, 2] = np.arange(n) // 4
    log[:, 3] = base + np.arange(n) * 1000
    log[:, 4] = log[:, 3] + 500
    log[:, 5] = log[:, 4] + 10
    log[:, 6] = log[:, 5] + 20
    frame = tile_frame(cfg, log, schedule="fused")
    assert list(frame.columns[:len(COLUMNS["tile"])]) == COLUMNS["tile"]
    assert frame["mainloop_start(us)"].tolist()[:2] == [0.0, 1.0]
    np.testing.assert_allclose(frame["issue_end(us)"] - frame["issue_start(us)"], 0.02)
    assert frame["bytes_remote"].tolist() == [0] * 4 + [128 * 64 * 2] * 4  # rows 512.. go to rank 1
    assert tile_frame(cfg, log, schedule="fa")["bytes_remote"].eq(0).all()
    with pytest.raises(InputError):
        tile_frame(cfg, log[:-1], schedule="fa")


def test_records_roundtrip_and_summarize(tmp_path):
    folder = tmp_path / "attention"
    rows = _rows(8192, TIMES) + _rows(16384, {k: 4 * v for k, v in TIMES.items()})
    save_records(folder / "attention-kernel.parquet", "kernel", pd.DataFrame(rows), {"config": {}})
    frame, meta = load_records(folder / "attention-kernel.parquet", "kernel")
    assert meta["kind"] == "kernel" and len(frame) == len(rows)
    summary = summarize(tmp_path)
    assert [r["M"] for r in summary] == [8192, 16384]
    assert summary[1]["fa_us"] == 400.0
    pd.testing.assert_frame_equal(pd.DataFrame(summarize(tmp_path, platform="h200-pcie-host")), pd.DataFrame(summary))
    with pytest.raises(InputError):
        summarize(tmp_path, platform="nonesuch")
    with pytest.raises(InputError):
        summarize(tmp_path / "empty")


def test_cli_results_attention_json(tmp_path, capsys):
    pytest.importorskip("triton")
    from xstage.cli import main

    save_records(tmp_path / "attention" / "k.parquet", "kernel", pd.DataFrame(_rows(8192, TIMES)), {"config": {}})
    assert main(["results", "attention", "--data", str(tmp_path), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    for key in ("M", "fa_us", "serial_us", "fused_us", "serial_best_us", "sdpa_us", "fa_tflops", "hiding_ratio",
                "speedup_vs_serial", "speedup_vs_serial_best"):
        assert key in row
    assert row["hiding_ratio"] == pytest.approx(0.9)
