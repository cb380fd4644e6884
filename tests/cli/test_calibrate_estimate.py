"""``xstage calibrate --estimate`` (``xstage.hw.calib.estimate``): the time model is the least-squares fit of the
committed sweeps it names, its leave-one-out errors are those the docs and --help state, and the command prints the
sweep's size and time without measuring or writing anything."""

import json
from pathlib import Path

import numpy as np
import pytest

from xstage.hw.calib import estimate
from xstage.hw.calib.calibrate import CalibConfig, plan_size
from xstage.hw.calib.grids import grid_fields

DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="module")
def fit():
    return estimate.fit_time_model(DATA, estimate.FITTED_ON)


def test_the_time_model_is_the_fit_of_the_sweeps_it_names(fit):
    assert sorted(r["folder"] for r in fit["runs"]) == sorted(estimate.FITTED_ON)
    assert fit["coef"] == pytest.approx(estimate.TIME_MODEL, rel=1e-9)
    assert all(c > 0 for c in fit["coef"])          # a fixed cost, a cost per configuration, the kernels


def test_leave_one_out_errors_are_the_documented_ones(fit):
    err = {t: np.array([abs(r["loo_s"] - r["wall_s"]) / r["wall_s"] for r in fit["runs"] if r["target"] == t])
           for t in ("host", "local")}
    for target, (median, p90, n) in estimate.LOO_ERROR.items():   # the figures the help and the printed line quote
        assert len(err[target]) == n
        assert np.median(err[target]) == pytest.approx(median, abs=5e-4)
        assert np.quantile(err[target], 0.9) == pytest.approx(p90, abs=5e-4)
    assert estimate.loo_text() == "host 10.5 / 16.3 %, local 12.9 / 32.6 %"


def test_a_repeat_multiplies_the_time_and_more_configurations_cost_more():
    one = estimate.estimate(CalibConfig(target="host", **grid_fields("fresh15")))
    two = estimate.estimate(CalibConfig(target="host", repeat=2, **grid_fields("fresh15")))
    assert two["total_wall_estimate_s"] == pytest.approx(2 * one["wall_estimate_s"])
    wide = estimate.estimate(CalibConfig(target="host", **grid_fields("wide")))
    assert wide["configurations"] > one["configurations"] and wide["wall_estimate_s"] > one["wall_estimate_s"]


def test_estimate_prints_the_sweep_and_writes_nothing(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("calibrate", "--estimate", "--target", "host", "--grid", "wide", "--repeat", "2", "--json")
    e = json.loads(out)
    assert code == 0 and err == "" and list(tmp_path.iterdir()) == []
    cfg = CalibConfig(target="host", repeat=2, **grid_fields("wide")).clipped(132)
    assert e["configurations"] == plan_size(cfg) == 659 and e["repeat"] == 2
    assert e["total_wall_estimate_s"] == pytest.approx(2 * e["wall_estimate_s"])
    code, out, _ = cli("calibrate", "--estimate", "--target", "local", "--grid", "fresh15")
    assert code == 0 and "estimated about" in out and "h200-local" in out


@pytest.mark.parametrize("argv, field", [(["--estimate"], "--target"),
                                        (["--estimate", "--refit", "--target", "host"], "--estimate")])
def test_estimate_refuses_what_it_cannot_estimate_in_one_line(cli, argv, field):
    code, out, err = cli("calibrate", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"xstage: error: {field}(")
