"""``xstage calibrate --pool`` (session 10, knee10): other calibration folders' fit halves join the fit, less any
(K, B) pair held out of the fitted records; the check, the split and the records stay the run's own; bad input is
one line naming --pool and the value, exit status 2."""

import json
from pathlib import Path

import pandas as pd
import pytest

from xstage.cli import main
from xstage.hw.calib import calibrate

EXTRA = Path(__file__).resolve().parents[2] / "data" / "calibration-extra"
HOST5, HOST2, LOCAL2 = (EXTRA / f for f in ("h200-pcie-host-fresh5", "h200-pcie-host-fresh2", "h200-local-fresh2"))


def _one_line(capsys, *words):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xstage: error: --pool"), err
    for w in words:
        assert w in err[0], (w, err[0])


def test_pooled_rows_take_the_fit_half_less_pairs_held_out_here():
    pts = pd.DataFrame({"producers": [4, 4, 8, 8, 16], "bytes_per_producer": [1024, 2048, 1024, 2048, 1024],
                        "split": ["fit", "heldout", "fit", "fit", "fit"], "T_iss(us)": [1.0, 2, 3, 4, 5]})
    rows, info = calibrate.pooled_rows([(Path("a"), pts, {"config": {"grid": "g"}})], {(8, 2048)})
    assert sorted(zip(rows["producers"], rows["bytes_per_producer"])) == [(4, 1024), (8, 1024), (16, 1024)]
    assert "split" not in rows and info[0]["n_points"] == 3 and info[0]["n_left_out_heldout_pairs"] == 1
    rows, info = calibrate.pooled_rows([(Path("b"), pts.drop(columns=["split"]), {"config": {}})], set())
    assert len(rows) == 5 and info[0]["n_left_out_heldout_pairs"] == 0    # no recorded split: every row


def test_refit_with_a_pool_fits_more_and_checks_its_own(tmp_path, capsys):
    own, pooled = tmp_path / "own", tmp_path / "pooled"
    base = ["calibrate", "--refit", "--records", str(HOST5), "--model", "two-stage-gated2", "--json"]
    assert main(base + ["--out", str(own)]) == 0
    a = json.loads(capsys.readouterr().out)
    assert main(base + ["--out", str(pooled), "--pool", str(HOST2)]) == 0
    b = json.loads(capsys.readouterr().out)
    assert "pool" not in a and b["pool"][0]["records"] == str(HOST2) and b["pool"][0]["n_points"] > 0
    assert b["heldout_n_points"] == a["heldout_n_points"] and b["n_points"] == a["n_points"]   # the check is its own
    assert b["capacity_relax_GBps"] != a["capacity_relax_GBps"]                                 # the fit is not
    platform = json.loads((pooled / "platform.json").read_text())
    assert "h200-pcie-host-fresh2" in platform["notes"]["pool"]
    assert len(pd.read_parquet(pooled / "points.parquet")) == len(pd.read_parquet(own / "points.parquet"))


@pytest.mark.parametrize("pool,words", [
    (["/nonexistent/folder"], ("/nonexistent/folder", "points.parquet")),
    ([str(LOCAL2)], ("h200-local-fresh2", "local calibration")),
    ([str(HOST2), str(HOST2)], ("h200-pcie-host-fresh2", "twice")),
    ([str(HOST5)], ("h200-pcie-host-fresh5", "--records itself")),
])
def test_bad_pool_is_one_line_exit_2(tmp_path, capsys, pool, words):
    args = ["calibrate", "--refit", "--records", str(HOST5), "--out", str(tmp_path / "o")]
    for p in pool:
        args += ["--pool", p]
    assert main(args) == 2
    _one_line(capsys, *words)
    assert not (tmp_path / "o").exists()


def test_a_sweep_checks_its_pool_before_it_starts(tmp_path, capsys, monkeypatch):
    def no_sweep(*a, **k):
        raise AssertionError("the sweep started")

    monkeypatch.setattr(calibrate, "sweep", no_sweep)
    assert main(["calibrate", "--sim", "paper-b200", "--target", "host", "--quick", "--out", str(tmp_path / "o"),
                 "--pool", str(LOCAL2)]) == 2
    _one_line(capsys, "local calibration")


def test_a_sweep_checks_its_pools_gpu_before_it_starts(tmp_path, monkeypatch):
    """The GPU a pool folder was measured on is known only once the runner is open: still before the sweep."""
    class OtherGPU:
        def describe(self):
            return {"runner": "gpu", "gpu_name": "NVIDIA B200"}

    def no_sweep(*a, **k):
        raise AssertionError("the sweep started")

    monkeypatch.setattr(calibrate, "sweep", no_sweep)
    cfg = calibrate.CalibConfig(target="host")
    with pytest.raises(calibrate.InputError, match="was measured on NVIDIA H200"):
        calibrate.run_calibration(cfg, OtherGPU(), tmp_path / "o", pool=[str(HOST2)])
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_a_sweep_pools_too(tmp_path, capsys):
    assert main(["calibrate", "--sim", "h200-pcie-host", "--target", "host", "--grid", "fresh10", "--quick",
                 "--model", "two-stage-gated2", "--pool", str(HOST5), "--out", str(tmp_path / "o"), "--json",
                 "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [p["grid"] for p in summary["pool"]] == ["fresh5"] and summary["pool"][0]["n_points"] > 0
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["pool"] == summary["pool"]
