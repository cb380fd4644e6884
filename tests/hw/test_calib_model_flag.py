"""``xstage calibrate --model`` and ``--refit --records SRC``: the model is fitted, recorded and reported;
the source folder is only read; bad values are one line and exit 2."""

import json

import pytest

from xstage.cli import main



def _one_line(capsys, start):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(start), err


@pytest.mark.parametrize("argv, start", [
    (["--refit", "--model", "v2"], "xstage: error: --model(='v2')"),
    (["--target", "host", "--sim", "h200-pcie-host", "--model", "relax"], "xstage: error: --model(='relax')"),
    (["--records", "SRC", "--target", "host"], "xstage: error: --records(='SRC') needs --refit"),
    (["--refit", "--records", ""], "xstage: error: --records(='')"),
])
def test_bad_values_are_one_line(tmp_path, capsys, argv, start):
    assert main(["calibrate", "--out", str(tmp_path / "o"), *argv]) == 2
    _one_line(capsys, start)
    assert not (tmp_path / "o").exists()


def test_refit_records_into_a_new_folder_with_another_model(data, tmp_path, capsys):
    src = data / "calibration" / "h200-pcie-host"
    before = {f.name: f.read_bytes() for f in src.iterdir()}
    out = data / "calibration-extra" / "h200-pcie-host-relax"
    assert main(["calibrate", "--refit", "--records", str(src), "--model", "two-stage-relax", "--out", str(out),
                 "--heldout-fraction", "0.3", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {f.name: f.read_bytes() for f in src.iterdir()} == before              # the source only read
    platform = json.loads((out / "platform.json").read_text())
    assert platform["schema_version"] == 2 and platform["capacity_relax_GBps"] > 0
    assert summary["model"] == "two-stage-relax" and "two-stage-relax" in platform["notes"]["model"]
    assert main(["results", "calibration", "--data", str(data), "--platform", "h200-pcie-host-relax", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["model"] == "two-stage-relax" and got["heldout_n_points"] > 0 and got["split_source"] == "recorded"
    assert got["heldout_median_rel_err_T_iss"] == pytest.approx(summary["heldout_median_rel_err_T_iss"], rel=1e-9)
    assert main(["calibrate", "--refit", "--records", str(src), "--out", str(out)]) == 2    # never over a folder
    _one_line(capsys, "xstage: error:")
    assert main(["results", "calibration", "--data", str(data), "--platform", "h200-pcie-host", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "v1"                  # older records: v1


def test_default_model_is_v1_and_the_refit_keeps_the_recorded_one(data, tmp_path, capsys):
    src = data / "calibration" / "h200-pcie-host"
    assert main(["calibrate", "--refit", "--records", str(src), "--model", "two-stage", "--out",
                 str(tmp_path / "a"), "--json"]) == 0
    capsys.readouterr()
    assert main(["calibrate", "--refit", "--out", str(tmp_path / "a"), "--overwrite", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["model"] == "two-stage" and again["schema_version"] == 2
    assert main(["calibrate", "--refit", "--records", str(src), "--out", str(tmp_path / "b"), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["model"] == "v1" and "schema_version" not in plain
