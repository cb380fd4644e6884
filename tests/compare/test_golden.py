"""The compare layer on golden slices of the committed measurements (tests/golden/data, cut by
tests/golden/cut.py): measured quirks, not simulated rows relabelled as hardware.

Pinned figures are those of the compare layer on these rows today (relative tolerance 1e-6): a
change to the simulator, the platform files or a comparison rule that moves them fails here.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xstage.compare.experiments import compare_parts, load_arguments
from xstage.records import load_records

GOLDEN = Path(__file__).parents[1] / "golden"
DATA = GOLDEN / "data"


def _cut_module():
    spec = importlib.util.spec_from_file_location("golden_cut", GOLDEN / "cut.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compare(*paths):
    return compare_parts(load_arguments([DATA / p for p in paths]), None, DATA)


def test_the_slices_are_cut_reproducibly_from_the_committed_records(tmp_path):
    sources = _cut_module().cut(tmp_path)
    assert sources == json.loads((DATA / "SOURCES.json").read_text())
    for rel, info in sources.items():
        if rel.endswith(".json"):   # platform files: copies
            assert (DATA / rel).read_bytes() == (tmp_path / rel).read_bytes()
        else:
            (a, meta_a), (b, meta_b) = load_records(DATA / rel), load_records(tmp_path / rel)
            pd.testing.assert_frame_equal(a, b)
            assert meta_a == meta_b and meta_a["golden"]["source"] == info["source"]
            asked = "point" if rel.endswith("points.parquet") else None  # version 1 kept points as summaries
            assert meta_a["kind"] == info["kind"] == load_records(GOLDEN.parents[1] / info["source"], asked)[1]["kind"]
            assert 0 < len(a) <= 500, rel


def test_points_are_the_measured_side_not_per_producer_burst_medians():
    """On the PCIe host link producers are served unfairly: the per-producer median issue time of the
    sampled burst records is about half the aggregate one, so the burst path misses by > 100 % where
    the points path (aggregate T_iss) is within a few per cent."""
    points, pm = _compare("calibration/h200-pcie-host")
    bursts, bm = _compare("calibration/h200-pcie-host/bursts.parquet")
    p, b = points["calibration points"], bursts["bursts"]
    assert len(p) == 41 and set(p["mode"]) == {"periodic", "free", "isolated"}
    assert pm["calibration points"]["issue_median_rel_err"] == pytest.approx(0.0177131, rel=1e-5)
    assert pm["calibration points"]["period_median_rel_err"] == pytest.approx(0.00288797, rel=1e-5)
    assert pm["calibration points"]["period_n_points"] == 35   # isolated points have no period
    assert p.loc[p["mode"] == "isolated", "measured_period(us)"].isna().all()
    assert (p.loc[p["mode"] == "free", "simulated_mode"] == "periodic").all()
    assert bm["bursts"]["periodic_issue_median_rel_err"] > 1.0 > 0.05 > pm["calibration points"][
        "periodic_issue_median_rel_err"]
    # the simulator's period agrees either way: the drain rate is what the link enforces
    assert bm["bursts"]["periodic_period_median_rel_err"] < 0.01
    # the free-running burst records are simulated in the periodic mode, not refused
    assert list(b["mode"]) == ["free", "isolated", "periodic", "periodic"]


def test_lockstep_points_are_simulated_at_the_measured_gap():
    """In lockstep mode the measured gap includes the barrier wait: the simulator runs at it."""
    rows, _ = _compare("calibration/h200-pcie-host")
    rows = rows["calibration points"]
    lock = rows[(rows["mode"] == "periodic") & (rows["gap_measured(us)"] > rows["gap(us)"] + 1.0)]
    assert len(lock) > 0
    pts, _ = load_records(DATA / "calibration/h200-pcie-host/points.parquet")
    assert np.isfinite(pts["gap_measured(us)"]).all()


def test_attention_uses_the_chosen_fused_kernel_among_tuning_and_option_variants():
    parts, metrics = _compare("attention")
    kern, _ = load_records(DATA / "attention/attention-kernel.parquet")
    assert {"fa_tune", "fused_tune", "fused_wb", "fused_wt"} <= set(kern["variant"])
    a = parts["attention"].set_index("M")
    assert list(a.index) == [8192, 16384]
    at = lambda M, v: float(kern.loc[(kern["M"] == M) & (kern["variant"] == v), "time(us)"].iloc[0])  # noqa: E731
    assert a.loc[8192, "measured_fused(us)"] == at(8192, "fused")
    assert a.loc[8192, "measured_fa_only(us)"] == at(8192, "fa")
    assert a.loc[8192, "send"] == "stagger" and a.loc[8192, "world_size"] == 8
    assert metrics["attention"]["fused_median_rel_err"] == pytest.approx(0.0787795, rel=1e-5)
    assert metrics["attention"]["speedup_sign_agreement"] == 1.0
    tiles = parts["attention tiles"].iloc[0]
    assert tiles["tiles"] == 192 and tiles["programs"] == 132
    assert tiles["simulated_span_median(us)"] == pytest.approx(1.008021, rel=1e-5)
    assert tiles["measured_span_median(us)"] == pytest.approx(0.448, rel=1e-6)


def test_moe_kernels_local_and_pointer_variants_are_not_the_schedules():
    parts, metrics = _compare("moe")
    kern, _ = load_records(DATA / "moe/moe-kernel.parquet")
    assert {"expert_wave_local", "interleaved_local", "expert_wave_ptr"} <= set(kern["variant"])
    m = parts["moe"].set_index("config")
    for config, row in m.iterrows():
        sel = kern[kern["config"] == config].set_index("variant")["time(us)"]
        assert row["measured_wave(us)"] == sel["expert_wave"] and row["measured_int(us)"] == sel["interleaved"]
        assert row["measured_speedup"] == pytest.approx(sel["expert_wave"] / sel["interleaved"])
    assert metrics["moe"]["speedup_sign_agreement"] == 1.0
    assert metrics["moe"]["speedup_median_rel_err"] == pytest.approx(0.0677846, rel=1e-5)


def test_moe_over_two_ranks_takes_the_slowest_rank():
    parts, metrics = _compare("moe-dist")
    kern, _ = load_records(DATA / "moe-dist/moe-kernel.parquet")
    assert sorted(set(kern["rank"])) == [0, 1] and set(kern["platform"]) == {"h200-nvlink"}
    m = parts["moe"].set_index("config")
    for config, row in m.iterrows():
        wave = kern[(kern["config"] == config) & (kern["variant"] == "expert_wave")]["time(us)"]
        assert len(wave) == 2 and row["measured_wave(us)"] == wave.max()
    # on the NVLink pair the simulator sees no X-Stage stall: both schedules take the same time, so the
    # sign of the measured slowdown (speedup < 1) is never matched
    assert np.allclose(m["simulated_speedup"], 1.0, atol=1e-6) and (m["measured_speedup"] < 1.0).all()
    assert metrics["moe"]["speedup_sign_agreement"] == 0.0


def test_the_page_collectors_on_the_golden_records(tmp_path):
    from xstage.compare.collect import collect
    from xstage.compare.store import load_frames, save_frames

    c = collect(DATA, ["h200-pcie-host"], quick=True)
    assert set(c["errors"]["experiment"]) == {"calibration bursts: h200-pcie-host", "MoE kernels",
                                              "FlashAttention + A2A"}
    assert c["calibration"]["h200-pcie-host"]["params"]["hw source"].iloc[0].startswith("points.parquet")
    assert c["attention"]["compare_platform"] == "h200-pcie-host" and len(c["attention"]["tiles"]) == 1
    assert "compare" in c["moe"] and "hw_l2" not in c["spans"]   # kernel records only, no MoE tiles
    back = load_frames(save_frames(tmp_path / "frames", c))
    pd.testing.assert_frame_equal(back["errors"], c["errors"])
    pd.testing.assert_frame_equal(back["calibration"]["h200-pcie-host"]["compare"],
                                  c["calibration"]["h200-pcie-host"]["compare"])
