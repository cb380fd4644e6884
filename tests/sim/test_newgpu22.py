"""The H100 calls of session 22 (docs/calibration/newgpu22.md): the records carry the pre-registration commit and the
GPU, the committed verdicts follow from the committed folders by the pre-registered checks, and the figures that need
no refit are recomputed from the records."""

import functools
import json

import pytest

from xstage.paths import data_dir
from xstage.records import load_records
from xstage.sim.heldout_misses import meets_targets

from .bench_scripts import load_script

EXTRA = data_dir() / "calibration-extra"
CALL1 = ("h100-pcie-host", "h100-local", "h100-pcie-host-r2", "h100-pcie-host-fresh16")
CALL2 = ("h100-pcie-host-fresh15", "h100-pcie-host-fresh", "h100-local-r2")


@functools.cache
def scores(name: str) -> dict:
    return json.loads((EXTRA / name).read_text())


@pytest.mark.parametrize("folders,commit,uuid", [(CALL1, "b553e3d", "GPU-f8be2b51"), (CALL2, "2ed3fc9", "GPU-5cd5322c")])
def test_records_carry_the_preregistration_commit_and_an_h100(folders, commit, uuid):
    for name in folders:
        platform = json.loads((EXTRA / name / "platform.json").read_text())
        prov = platform["notes"]["provenance"]
        assert prov["git_commit"].startswith(commit), name
        assert "H100" in json.dumps(platform["notes"]) and uuid in json.dumps(platform["notes"]), name
        _, meta = load_records(EXTRA / name / "points.parquet", "point")
        assert meta["provenance"]["git_commit"].startswith(commit), name
        assert not (EXTRA / name / "bursts.parquet").exists()


def test_primary_verdicts_follow_from_each_commands_own_summary():
    rec = scores("h100-newgpu22-scores.json")
    assert rec["pre_registered"] and rec["rule"].endswith("h100-newgpu-preregistration.md")
    for target, name in (("host", "h100-pcie-host"), ("local", "h100-local")):
        own = json.loads((EXTRA / name / "summary.json").read_text())
        got = rec["primary"][target]
        assert got["heldout_p90_rel_err_T_iss"] == own["heldout_p90_rel_err_T_iss"]
        assert got["meets"] is meets_targets(own) is False and got["verdict"] == "not met"
    # the seed rows and combo18's verdict follow from their own rows
    for rows in (rec["secondary"]["seeds_1_4"]["h100-pcie-host"], rec["secondary"]["seeds_1_4"]["h100-local"]):
        assert rows["met"] == sum(meets_targets(r) for r in rows["rows"]) == 0
    combo = rec["secondary"]["combo18_fresh16"]
    assert [r["seed"] for r in combo["rows"]] == [0, 1, 2, 3, 4]
    assert combo["met"] == sum(meets_targets(r) for r in combo["rows"]) == 5 and combo["verdict"] == "met"


def test_second_call_verdicts_follow_from_their_rows():
    rec = scores("h100-second-scores.json")
    assert rec["rule"].endswith("h100-second-preregistration.md")
    a = rec["primary"]["A_combo18_fresh15"]
    assert a["issue_law_from"] == "h100-pcie-host" and len(a["rows"]) == 5
    assert a["met"] == sum(meets_targets(r) for r in a["rows"]) == 0 and a["verdict"] == "not met"
    b = rec["primary"]["B_wide_platform_on_fresh"]
    assert b["verdict"] == "not met" and 0.05 < b["every_point"]["median_rel_err_T_iss"] < 0.052


def test_the_carried_platform_figure_is_recomputed_from_the_records():
    """Primary B needs no fit: the committed wide platform on the fresh folder's points, recomputed here."""
    mod = load_script("calib_newgpu22")
    got = mod.carried_verdict("h100-pcie-host/platform.json", "h100-pcie-host-fresh")
    want = scores("h100-second-scores.json")["primary"]["B_wide_platform_on_fresh"]
    assert got["every_point"] == pytest.approx(want["every_point"], rel=1e-9)
    assert got["verdict"] == want["verdict"] == "not met"


def test_the_instrument_figure_is_recomputed_from_the_two_runs():
    mod = load_script("calib_newgpu22_scan")
    rows = mod.instrument(log=lambda *a, **k: None)
    want = scores("h100-newgpu22-instrument-posthoc.json")["rows"]
    assert [r["seed"] for r in rows] == [0, 1, 2, 3, 4]
    for r, w in zip(rows, want):
        assert r["p90_T_iss"] == pytest.approx(w["p90_T_iss"], rel=1e-9) and r["p90_T_iss"] < 0.15


def test_the_two_gpus_side_by_side_is_recomputed_from_the_records():
    mod = load_script("calib_newgpu22_scan")
    got = mod.gpus()
    want = scores("h100-h200-wide-posthoc.json")
    cap = got["backpressured_isolated_capacity_MiB"]
    for gpu, per_k in want["backpressured_isolated_capacity_MiB"].items():   # JSON keys are strings
        assert {str(k): v for k, v in cap[gpu].items()} == pytest.approx(per_k, rel=1e-9)
    # what the page says: about half the H200's capacity at K = 16-99, the same pace below the knee
    assert all(cap["h100-pcie-host"][k] < 0.8 * cap["h200-pcie-host-wide"][k] for k in (16, 24, 33, 48, 66, 99))
    assert 0.95 < got["t_iss_ratio_h100_over_h200"]["free-rate"]["median"] < 1.05
