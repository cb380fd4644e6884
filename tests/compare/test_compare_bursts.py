"""Burst records side by side: steady-state summaries and re-simulation on the calibrated platform."""

import math

import numpy as np
import pandas as pd
import pytest

from xstage.compare.bursts import (burst_error_summary, compare_bursts, compare_points, find_platform,
                                   load_calibration_points, platform_for, summarize_bursts)
from xstage.compare.calibration import calibration_frames, fit_drain_rate_GBps
from xstage.errors import InputError
from xstage.records import COLUMNS
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.records.platform import save_platform



def _hand_frame(mode="periodic", issues=(9.0, 9.0, 1.0, 3.0), trial=None):
    n = len(issues)
    frame = pd.DataFrame({"source": "hw", "platform": "paper-b200", "target": "peer", "mode": mode, "producers": 1,
                          "bytes_per_producer": 4096, "gap(us)": 0.0, "producer": 0, "burst": np.arange(n),
                          "start(us)": np.arange(n) * 10.0, "issue(us)": list(issues),
                          "period(us)": [10.0] * (n - 1) + [np.nan]})
    if trial is not None:
        frame["trial"] = trial
    return frame


def test_summary_uses_the_steady_half_and_skips_the_first_isolated_burst():
    s = summarize_bursts(_hand_frame())
    assert s[["bursts", "issue(us)", "period(us)"]].iloc[0].tolist() == [4, 2.0, 10.0]  # bursts 2, 3
    iso = summarize_bursts(_hand_frame(mode="isolated"))
    assert iso["issue(us)"].iloc[0] == 3.0  # bursts 1..3: median of 9, 1, 3


def test_summary_takes_the_median_over_trials_of_per_trial_medians():
    frame = pd.concat([_hand_frame(issues=(0, 0, 1, 1), trial=0), _hand_frame(issues=(0, 0, 2, 2), trial=1),
                       _hand_frame(issues=(0, 0, 9, 9), trial=2)], ignore_index=True)
    assert summarize_bursts(frame)["issue(us)"].iloc[0] == 2.0


def test_simulated_records_compare_with_zero_error(b200):
    frames = [simulate_bursts(b200, BurstConfig(K, B, G, bursts=12, mode=m)).bursts
              for m, K, B, G in [("periodic", 148, 32768, 0.0), ("periodic", 64, 16384, 1.0),
                                 ("isolated", 148, 65536, 0.0), ("local", 32, 8192, 2.0)]]
    rows = compare_bursts(pd.concat(frames, ignore_index=True), b200)
    assert len(rows) == 4
    assert np.allclose(rows["issue_rel_err"], 0.0, atol=1e-9)
    assert rows.loc[rows["mode"] == "isolated", "measured_period(us)"].isna().all()
    periodic = rows[rows["mode"] == "periodic"].set_index("producers")
    assert math.isclose(periodic.loc[148, "model_issue(us)"], 148 * 32768 / 717e3, rel_tol=1e-12)


def test_a_slower_measurement_shows_as_its_relative_error(b200):
    b = simulate_bursts(b200, BurstConfig(148, 32768, 0.0, bursts=10)).bursts.assign(source="hw")
    b["issue(us)"] *= 1.10
    s = burst_error_summary(compare_bursts(b, "paper-b200"))
    assert math.isclose(s["issue_median_rel_err"], 0.1 / 1.1, rel_tol=1e-9)  # |sim - meas| / meas
    assert s["period_median_rel_err"] == 0.0


def test_platform_resolution(b200, tmp_path):
    frame = _hand_frame()
    assert platform_for(frame).name == "paper-b200"
    with pytest.raises(InputError, match="exactly one platform"):
        platform_for(pd.concat([frame, frame.assign(platform="other")]))
    with pytest.raises(InputError, match="neither bundled nor calibrated"):
        find_platform("no-such-platform", tmp_path)
    save_platform(b200, tmp_path / "calibration" / "mine" / "platform.json")
    assert find_platform("mine", tmp_path).drain_rate_GBps == 717.0


def test_calibration_frames_hold_model_sim_and_measured_series(b200, tmp_path):
    b = simulate_bursts(b200, BurstConfig(148, 32768, 0.0, bursts=10)).bursts.assign(source="hw")
    frames = calibration_frames(b200, b, fast=True)
    assert set(frames["gap_sweep"]["series"]) >= {"model", "coupled model", "model local", "sim", "hw"}
    assert set(frames["drain"]["series"]) == {"sim", "model", "hw"}
    assert math.isclose(fit_drain_rate_GBps(frames["drain"], b200, "hw"), 717.0, rel_tol=1e-9)
    assert frames["params"]["hw experiments"].iloc[0] == 1
    assert "compare" in frames
    assert "compare" not in calibration_frames(b200, None, fast=True)
    assert list(b.columns[:len(COLUMNS["burst"])]) == COLUMNS["burst"]


# --- calibration points (points.parquet) ---------------------------------------------------------------

def _dash_records():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("dash_records", Path(__file__).parents[1] / "dash_records.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sim_points(b200):
    return _dash_records().simulated_points(b200).assign(platform="paper-b200")


def test_simulated_points_compare_with_zero_error_in_every_mode(b200, sim_points):
    rows = compare_points(sim_points, fast=True)
    assert len(rows) == len(sim_points)
    assert np.allclose(rows["issue_rel_err"], 0.0, atol=1e-9)
    assert rows.loc[rows["mode"] == "isolated", "measured_period(us)"].isna().all()
    assert set(rows["simulated_mode"]) == {"periodic", "isolated"}            # free -> the simulator's periodic
    s = burst_error_summary(rows)
    assert s["free_issue_n_points"] == 2 and s["isolated_issue_n_points"] == 2 and s["periodic_period_n_points"] == 5
    assert "isolated_period_n_points" not in s
    # the full model: max(T_iss0, V/R - G, (V - Q)/R) + G for periodic points, Eq. 7 for isolated ones
    rate = rows[(rows["phase"] == "rate") & (rows["producers"] == 148)].iloc[0]
    assert math.isclose(rate["model_period(us)"], 148 * 32768 / 717e3, rel_tol=1e-9)


def test_points_use_the_measured_gap_and_show_a_slower_aggregate(b200, sim_points):
    slow = sim_points.assign(**{"T_iss(us)": sim_points["T_iss(us)"] * 1.25})
    s = burst_error_summary(compare_points(slow, b200, fast=True))
    assert math.isclose(s["issue_median_rel_err"], 0.25 / 1.25, rel_tol=1e-9)
    # a lockstep point whose measured gap (barrier wait included) exceeds its nominal gap is simulated at it
    one = sim_points.iloc[[0]].assign(**{"gap_measured(us)": 50.0})
    row = compare_points(one, b200, fast=True).iloc[0]
    assert row["gap(us)"] == 0.0 and row["gap_measured(us)"] == 50.0
    assert math.isclose(row["simulated_period(us)"], row["simulated_issue(us)"] + 50.0, rel_tol=1e-9)
    with pytest.raises(InputError, match="points mode"):
        compare_points(sim_points.assign(mode="sideways"), b200)


def test_calibration_frames_prefer_points_to_per_producer_medians(b200, sim_points):
    bursts = simulate_bursts(b200, BurstConfig(148, 32768, 0.0, bursts=10)).bursts.assign(source="hw")
    bursts["issue(us)"] *= 5.0   # a per-producer view that must not be used when points exist
    frames = calibration_frames(b200, bursts, points=sim_points, fast=True)
    assert frames["params"]["hw source"].iloc[0].startswith("points.parquet")
    assert np.allclose(frames["compare"]["issue_rel_err"], 0.0, atol=1e-9)
    gap = frames["gap_sweep"]
    assert {"hw", "hw fma", "hw free", "sim", "model", "coupled model"} <= set(gap["series"])
    assert set(zip(gap["producers"], gap["bytes_per_producer"])) == {(148, 32768)}   # the swept configuration
    assert set(frames["knee"]["series"]) == {"model", "sim", "hw"}
    drain = frames["drain"]
    assert set(drain["series"]) == {"model", "sim", "hw", "hw free"}
    assert math.isclose(fit_drain_rate_GBps(drain, b200, "hw"), 717.0, rel_tol=1e-6)
    fallback = calibration_frames(b200, bursts, fast=True)
    assert fallback["params"]["hw source"].iloc[0].startswith("burst records")


def test_a_calibration_folder_compares_its_points_not_its_burst_sample(b200, sim_points, tmp_path):
    from xstage.compare.experiments import compare_records, load_arguments
    from xstage.records import save_records

    folder = tmp_path / "paper-b200"
    save_records(folder / "points.parquet", "point", sim_points.drop(columns="platform"), {"config": {}})
    bursts = simulate_bursts(b200, BurstConfig(148, 32768, 0.0, bursts=10)).bursts.assign(source="hw")
    save_records(folder / "bursts.parquet", "burst", bursts, {"config": {}})
    assert load_calibration_points(folder / "points.parquet")["platform"].eq("paper-b200").all()  # folder name
    grouped = load_arguments([folder])
    assert set(grouped) == {"points"}
    rows, metrics = compare_records(grouped)
    assert set(rows["experiment"]) == {"calibration points"} and metrics["calibration points"]["n_experiments"] == 9
    assert set(load_arguments([folder / "bursts.parquet"])) == {"burst"}
