"""Held-out validation of a calibration (issue 15): the split holds out whole (K, B) pairs, is reproducible
from its seed and recorded; a platform fitted on the fit points of a simulated sweep predicts the held-out
points; `xstage results calibration` reports held-out figures for committed records with and without a
recorded split; the wide grid runs on the simulator."""

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xstage.cli import main
from xstage.errors import InputError
from xstage.compare.calibration_records import summarize_results
from xstage.hw.calib import calibrate
from xstage.hw.calib.grids import GRIDS
from xstage.sim.calib_runner import SimRunner
from xstage.records import load_records
from xstage.sim import fit as calib_fit
from xstage.sim.platform import Platform
from xstage.sim.platform_fit import fit_split_platform, split_errors, split_pairs
from xstage.units import KiB, MiB
from xstage.records.platform import save_platform

HOSTLIKE = Platform(name="synthetic-host", sm_count=132, drain_rate_GBps=50.0, t_fixed_us=1.5,
                    producer_issue_GBps=20.0, injection_GBps=400.0, target="host",
                    capacity_points=((33, 1 * MiB), (66, 2 * MiB), (132, 3 * MiB)))
SMALL = calibrate.CalibConfig(target="host", producers=(16, 66, 132), sizes=(8 * KiB, 16 * KiB, 32 * KiB, 64 * KiB),
                              gap_configs=((132, 32 * KiB), (66, 16 * KiB)), gap_fractions=(0.2, 0.5, 0.8, 1.2),
                              iso_producers=(66, 132), iso_sizes=tuple(k * KiB for k in (2, 4, 8, 16, 32, 64, 128, 256)),
                              bursts=12, steady_bytes=8 * MiB, max_bursts=128, iso_bursts=3, trials=1, copy_engine=False)

DATA = Path(__file__).resolve().parents[2] / "data"
HELD_KEYS = ("heldout_median_rel_err_T_iss", "heldout_p90_rel_err_T_iss", "heldout_median_rel_err_period",
             "heldout_p90_rel_err_period", "heldout_n_points")


@pytest.fixture(scope="module")
def swept():
    points, _ = calibrate.sweep(SMALL, SimRunner(HOSTLIKE), progress=False)
    return points


def _pairs_of(points, split, which):
    sel = split.to_numpy() == which
    return set(zip(points["producers"][sel], points["bytes_per_producer"][sel]))


def test_split_holds_out_whole_pairs_and_keeps_the_extremes(swept):
    split = split_pairs(swept, 0.3, 0)
    held, fitted = _pairs_of(swept, split, "heldout"), _pairs_of(swept, split, "fit")
    assert held and not held & fitted                            # every point of a pair on one side
    periodic = set(zip(swept["producers"][swept["mode"] != "isolated"],
                       swept["bytes_per_producer"][swept["mode"] != "isolated"]))
    for k in set(swept["producers"]):
        for stratum in (True, False):
            sizes = sorted(b for kk, b in held | fitted if kk == k and ((kk, b) in periodic) == stratum)
            if sizes:
                assert {(k, sizes[0]), (k, sizes[-1])} <= fitted     # the smallest and largest B stay fitted
                assert len([b for b in sizes if (k, b) in held]) == min(len(sizes) - 2 if len(sizes) > 2 else 0,
                                                                         int(np.floor(0.3 * len(sizes) + 0.5)))
    assert any(m != "isolated" for m in swept["mode"][split.to_numpy() == "heldout"])   # periodic points held out


def test_split_is_reproducible_from_the_seed_alone(swept):
    a = split_pairs(swept, 0.3, 7)
    shuffled = swept.sample(frac=1.0, random_state=3)
    b = split_pairs(shuffled, 0.3, 7).reindex(swept.index)
    pd.testing.assert_series_equal(a, b)                        # row order does not matter, only the pairs
    seeds = {tuple(sorted(_pairs_of(swept, split_pairs(swept, 0.3, s), "heldout"))) for s in range(6)}
    assert len(seeds) > 1                                       # the seed chooses
    assert (split_pairs(swept, 0.0, 7) == "fit").all()
    for bad in (1.0, -0.1, float("nan"), "x"):
        with pytest.raises(InputError, match="heldout_fraction"):
            split_pairs(swept, bad, 0)
    with pytest.raises(InputError, match="split_seed"):
        split_pairs(swept, 0.3, -1)


def test_platform_fitted_on_the_fit_points_predicts_the_heldout_ones(swept):
    split = split_pairs(swept, 0.3, 0)
    platform, _ = fit_split_platform(swept, split, name="fit", target="host", sm_count=132)
    assert platform.drain_rate_GBps == pytest.approx(HOSTLIKE.drain_rate_GBps, rel=0.02)
    for K, Q in HOSTLIKE.capacity_points:
        assert platform.capacity_bytes(K) == pytest.approx(Q, rel=0.02)
    errs = split_errors(calib_fit.model_check(swept, platform), split)
    assert errs["heldout_n_points"] > 0 and errs["heldout_n_isolated_points"] > 0
    assert errs["heldout_p90_rel_err_T_iss"] < 0.01 and errs["heldout_p90_rel_err_period"] < 0.01
    assert errs["heldout_isolated_p90_rel_err_T_iss"] < 0.01
    # the check can fail: a platform with a wrong drain rate misses the held-out points
    wrong = dataclasses.replace(platform, drain_rate_GBps=0.7 * platform.drain_rate_GBps)
    bad = split_errors(calib_fit.model_check(swept, wrong), split)
    assert bad["heldout_p90_rel_err_period"] > 0.1


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    cfg = calibrate.CalibConfig(**{**SMALL.__dict__, "name": "split-host", "split_seed": 3})
    out = tmp_path_factory.mktemp("heldout") / "split-host"
    summary = calibrate.run_calibration(cfg, SimRunner(HOSTLIKE), out, progress=False, provenance_block={})
    return out, summary


def test_split_is_recorded_in_points_check_summary_and_notes(run_dir):
    out, summary = run_dir
    points, meta = load_records(out / "points.parquet", "point")
    assert set(points["split"]) == {"fit", "heldout"}
    assert meta["config"]["heldout_fraction"] == 0.3 and meta["config"]["split_seed"] == 3
    pd.testing.assert_series_equal(points["split"], split_pairs(points.drop(columns="split"), 0.3, 3),
                                   check_names=False)
    check = pd.read_parquet(out / "check.parquet")
    assert (check["split"].to_numpy() == points["split"].to_numpy()).all()
    stored = json.loads((out / "summary.json").read_text())
    assert stored["split_seed"] == 3 and stored["heldout_fraction"] == 0.3
    held = {tuple(p) for p in stored["split"]["heldout_pairs"]}
    assert held == _pairs_of(points, points["split"], "heldout")
    for key in HELD_KEYS + ("fit_median_rel_err_T_iss", "median_rel_err_T_iss"):
        assert key in stored
    assert "heldout_split" in Platform.load(out / "platform.json").notes
    # the platform was fitted on the fit points only: refitting those alone gives the same platform
    alone, _ = fit_split_platform(points, points["split"], name="split-host", target="host", sm_count=132)
    assert Platform.load(out / "platform.json").drain_rate_GBps == pytest.approx(alone.drain_rate_GBps, rel=1e-12)


def test_refit_keeps_the_recorded_split_and_results_report_it(run_dir, tmp_path):
    out, summary = run_dir
    copy = tmp_path / "data" / "calibration" / "split-host"
    shutil.copytree(out, copy)
    again = calibrate.refit(copy, overwrite=True)
    assert again["heldout_n_points"] == summary["heldout_n_points"]
    assert again["R_GBps"] == pytest.approx(summary["R_GBps"], rel=1e-12)
    got = summarize_results(tmp_path / "data", platform="split-host")
    assert got["split_source"] == "recorded" and got["split_seed"] == 3
    assert got["heldout_p90_rel_err_T_iss"] == pytest.approx(summary["heldout_p90_rel_err_T_iss"], rel=1e-9, abs=1e-12)
    other = calibrate.refit(copy, overwrite=True, split_args=(0.5, 1))            # a new split on request
    assert other["heldout_fraction"] == 0.5 and other["split_seed"] == 1


@pytest.mark.parametrize("name", ["h200-pcie-host", "h200-local", "h200-nvlink", "h200-pcie-host-aligned"])
def test_results_compute_a_split_for_committed_records_without_one(name, tmp_path, capsys):
    folders = [d for d in (DATA / "calibration" / name, DATA / "calibration-extra" / name) if d.is_dir()]
    if not folders:
        pytest.skip(f"no committed {name} calibration in this checkout")
    before = {f.name: f.read_bytes() for f in folders[0].iterdir()}
    assert main(["results", "calibration", "--platform", name, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert {f.name: f.read_bytes() for f in folders[0].iterdir()} == before       # never rewritten
    for key in HELD_KEYS + ("fit_median_rel_err_T_iss", "fit_n_points", "median_rel_err_T_iss", "n_points"):
        assert key in got
    assert got["split_source"] == "computed" and got["split_seed"] == 0 and got["heldout_fraction"] == 0.3
    assert got["heldout_n_points"] > 0 and got["heldout_n_points"] + got["fit_n_points"] == got["n_points"]
    assert 0 < got["heldout_median_rel_err_T_iss"] < 1 and got["heldout_p90_rel_err_period"] < 1
    points, _ = load_records(folders[0] / "points.parquet", "point")
    held = {tuple(p) for p in got["split"]["heldout_pairs"]}
    assert held == _pairs_of(points, split_pairs(points), "heldout")


def test_wide_grid_on_the_simulator_and_bad_split_flags(tmp_path, capsys):
    wide = GRIDS["wide"]
    assert min(wide["producers"]) == 4 and max(wide["producers"]) == 132
    assert min(wide["sizes"]) == 2 * KiB and max(wide["sizes"]) == 256 * KiB
    truth = dataclasses.replace(HOSTLIKE, capacity_points=((4, 0.2 * MiB), (33, 1 * MiB), (132, 3 * MiB)))
    save_platform(truth, tmp_path / "truth.json")
    out = tmp_path / "wide"
    assert main(["calibrate", "--sim", str(tmp_path / "truth.json"), "--target", "host", "--grid", "wide", "--quick",
                 "--out", str(out), "--quiet", "--json", "--split-seed", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    points, meta = load_records(out / "points.parquet", "point")
    assert meta["config"]["grid"] == "wide" and summary["grid"] == "wide"
    assert set(points["producers"]) == set(wide["producers"])
    assert {"rate", "plateau", "free-rate", "free-gap", "isolated"} <= set(points["phase"])
    assert summary["heldout_n_points"] > 0 and summary["heldout_p90_rel_err_T_iss"] < 0.01
    assert summary["R_GBps"] == pytest.approx(50.0, rel=0.01)
    for bad in (["--heldout-fraction", "1"], ["--heldout-fraction", "-0.1"], ["--heldout-fraction", "nan"],
                ["--split-seed", "-1"], ["--split-seed", "1.5"], ["--grid", "huge"]):
        argv = ["calibrate", "--sim", "paper-b200", "--target", "host", "--quick", "--out", str(tmp_path / "x")] + bad
        assert main(argv) == 2, bad
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and bad[0].lstrip("-").split("-")[0] in err[0], err
    assert not (tmp_path / "x").exists()
