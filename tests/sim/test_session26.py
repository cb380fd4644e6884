"""Session 26 (docs/calibration/h100-broad24.md, call25): call25's folders are one call on a fourth H100, its committed
scores follow from them, and the figures the docs quote from knee-band26 are the record's."""

import json

import pytest

from xstage.paths import data_dir
from xstage.records import load_records

from .bench_scripts import load_script

EXTRA = data_dir() / "calibration-extra"
CALL25 = ("h100-pcie-host-fresh11", "h100-pcie-host-fresh12", "h100-pcie-host-fresh13")
EARLIER_H100 = ("h100-pcie-host", "h100-pcie-host-fresh", "h100-pcie-host-fresh2")   # cards 1, 2, 3


def _uuid(folder: str) -> str:
    return load_records(EXTRA / folder / "points.parquet", "point")[1]["provenance"]["gpu"]["gpu_uuid"]


def test_call25_folders_are_one_call_on_a_fourth_h100():
    assert {_uuid(f) for f in CALL25} == {"GPU-6f00ac3f-d8d6-d7a0-9108-4cab94d16951"}
    assert len({_uuid(f) for f in EARLIER_H100} | {_uuid(CALL25[0])}) == 4


def test_call25_scores_follow_from_the_folders():
    rec = json.loads((EXTRA / "call25-scores.json").read_text())
    again = load_script("calib_call25").score("H100", log=lambda *a, **k: None)
    assert rec["primary"] == again["primary"] and rec["primary"]["verdict"] == "met"
    assert (rec["primary"]["A_far"]["pairs_off"], rec["primary"]["A_far"]["pairs"]) == (1, 66)      # the docs' figures
    assert (rec["primary"]["B_near"]["pairs_off"], rec["primary"]["B_near"]["pairs"]) == (27, 33)
    assert json.loads(json.dumps(again["bins"])) == rec["bins"]
    for f in CALL25:
        kept, now = rec["per_folder"][f]["carried"]["every_point"], again["per_folder"][f]["carried"]["every_point"]
        assert kept == pytest.approx(now, rel=1e-9)
    assert rec["per_folder"]["h100-pcie-host-fresh11"]["carried"]["every_point"]["p90_rel_err_T_iss"] == pytest.approx(
        1.634, abs=5e-4)


def test_the_figures_the_docs_quote_from_knee_band26_are_the_records():
    bins = {gpu: {b["bin"]: b for b in e["bins"]}
            for gpu, e in json.loads((EXTRA / "knee-band26.json").read_text())["gpus"].items()}
    h100 = bins["H100"]
    assert (h100["(1, 1.1]"]["pairs_off"], h100["(1, 1.1]"]["pairs"]) == (16, 18)
    assert (h100["(2, 3]"]["pairs_off"], h100["(2, 3]"]["pairs"]) == (13, 25)
    assert (h100["(1.25, 1.5]"]["pairs_off"], h100["(1.25, 1.5]"]["pairs"]) == (31, 37)
    far = ("(-inf, 0.5]", "(0.5, 0.8]", "(3, inf]")
    assert max(bins[gpu][b]["share_off"] for gpu in bins for b in far) < 0.095   # "at most 9 %"
