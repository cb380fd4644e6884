"""``xstage calibrate --refit`` on a copy of committed measurements: it refuses without --overwrite, keeps
every file's record kind, and the results still load (twice over); a sweep checks its output folder first."""

import json

import pytest

from xstage.cli import main
from xstage.hw.calib import calibrate
from xstage.records import load_records



def _results(data, capsys) -> dict:
    assert main(["results", "calibration", "--data", str(data), "--platform", "h200-pcie-host", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _kinds(folder) -> dict:
    """Each record file's kind; version 1 kept calibration points as summaries, version 2 as points."""
    asked = {"points.parquet": "point"}
    return {f: load_records(folder / f, asked.get(f))[1]["kind"] for f in calibrate.FILES
            if f.endswith(".parquet") and (folder / f).exists()}


def test_refit_refuses_without_overwrite_in_one_line(data, capsys):
    out = data / "calibration" / "h200-pcie-host"
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    assert main(["calibrate", "--refit", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"xstage: error: --out(='{out}')") and "--overwrite" in err[0]
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before            # nothing rewritten


def test_refit_keeps_record_kinds_and_results_load_twice(data, capsys):
    out = data / "calibration" / "h200-pcie-host"
    committed = _results(data, capsys)
    kinds = _kinds(out)
    assert kinds == {"bursts.parquet": "burst", "points.parquet": "point", "check.parquet": "summary",
                     "copy.parquet": "kernel"}
    for _ in range(2):                                                           # a second refit works too
        assert main(["calibrate", "--refit", "--out", str(out), "--overwrite", "--json"]) == 0
        capsys.readouterr()
        assert _kinds(out) == kinds
        got = _results(data, capsys)
        assert got["R_GBps"] == pytest.approx(committed["R_GBps"], rel=1e-9)
        assert got["n_points"] == committed["n_points"]


def test_sweep_checks_its_output_folder_before_it_starts(tmp_path, capsys, monkeypatch):
    def no_sweep(*a, **k):
        raise AssertionError("the sweep started")

    monkeypatch.setattr(calibrate, "sweep", no_sweep)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["calibrate", "--sim", "paper-b200", "--target", "host", "--quick", "--out", str(blocker / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be created" in err[0] and str(blocker / "x") in err[0]
