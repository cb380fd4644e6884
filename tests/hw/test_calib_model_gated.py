"""``xstage calibrate --model two-stage-gated`` (session 7): fitted, recorded and reported."""

import json

from xstage.cli import main


def test_refit_with_the_gated_model_is_recorded(data, tmp_path, capsys):
    src = data / "calibration" / "h200-pcie-host"
    out = tmp_path / "gated"
    assert main(["calibrate", "--refit", "--records", str(src), "--model", "two-stage-gated", "--out", str(out),
                 "--heldout-fraction", "0.3", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    platform = json.loads((out / "platform.json").read_text())
    assert summary["model"] == "two-stage-gated" and platform["schema_version"] == 2
    assert platform["capacity_relax_GBps"] > 0 and summary["heldout_n_points"] > 0
    assert "two-stage-gated" in platform["notes"]["model"]
