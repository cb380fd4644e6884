"""`xstage model` reports the knee ratio, and for a host platform the row of knee-band28's record at that ratio
(sim/knee_band.py)."""

import json

import pytest

from xstage.paths import data_dir


def test_model_reports_the_knee_ratio_and_the_records_row_for_a_host_platform(cli):
    pool = str(data_dir() / "calibration-extra" / "h100-pcie-host-pool24" / "platform.json")
    code, out, _ = cli("model", "-p", pool, "-K", "28", "-B", "56KiB", "--json")
    d = json.loads(out)
    assert code == 0 and d["knee_ratio"] == pytest.approx(1.3143, abs=1e-4) and d["knee_band"] == "(1.25, 1.5]"
    assert (d["knee_band_H100_pairs"], d["knee_band_H200_pairs"]) == (143, 36)
    assert d["knee_band_H100_share_off"] == pytest.approx(108 / 143)
    code, out, _ = cli("model", "-p", "paper-b200", "-K", "148", "-B", "32KiB", "--json")
    d = json.loads(out)
    assert "knee_ratio" in d and not any(k.startswith("knee_band") for k in d)   # not a host platform
