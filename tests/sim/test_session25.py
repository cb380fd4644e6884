"""Session 25 (docs/calibration/h100-broad24.md): call24's committed scores follow from its committed folders,
the folders are the third H100's, cards25's post-hoc record follows from the committed points, and the H100 folders'
model checks stay out of the wheel while their points ship."""

import json
from pathlib import Path

import pytest

from xstage.paths import data_dir
from xstage.records import load_records

from .bench_scripts import load_script

EXTRA = data_dir() / "calibration-extra"
CALL24 = ("h100-pcie-host-fresh2", "h100-pcie-host-fresh3", "h100-pcie-host-fresh5", "h100-local-r3",
          "h100-local-fresh2")


def test_call24_folders_are_one_call_on_a_third_h100():
    uuids = {load_records(EXTRA / f / "points.parquet", "point")[1]["provenance"]["gpu"]["gpu_uuid"] for f in CALL24}
    assert uuids == {"GPU-1f4eeba2-eb11-30c0-963c-3ba4bc4ab30f"}
    earlier = {load_records(EXTRA / f / "points.parquet", "point")[1]["provenance"]["gpu"]["gpu_uuid"]
               for f in ("h100-pcie-host", "h100-pcie-host-fresh")}
    assert not uuids & earlier


def test_call24_scores_follow_from_the_folders():
    rec = json.loads((EXTRA / "call24-scores.json").read_text())
    again = load_script("calib_call24").score(log=lambda *a, **k: None)
    assert rec["primary"]["H_pool24_on_fresh2_fresh3"]["verdict"] == again["primary"]["H_pool24_on_fresh2_fresh3"][
        "verdict"] == "not met"
    assert rec["primary"]["L_local_on_wide"]["verdict"] == again["primary"]["L_local_on_wide"]["verdict"] == "met"
    for grid, p90 in (("fresh2", 0.2590), ("fresh3", 0.1643)):
        kept = rec["primary"]["H_pool24_on_fresh2_fresh3"][grid]["every_point"]
        now = again["primary"]["H_pool24_on_fresh2_fresh3"][grid]["every_point"]
        assert kept == pytest.approx(now, rel=1e-9)
        assert kept["p90_rel_err_T_iss"] == pytest.approx(p90, abs=5e-5)   # the figure the docs give
    assert rec["primary"]["H_pool24_on_fresh2_fresh3"]["fresh2"]["platform"].startswith("data/calibration-extra/")


def test_cards25_record_follows_from_the_points_and_each_contradiction_holds():
    rec = json.loads((EXTRA / "h100-cards25-posthoc.json").read_text())
    mod = load_script("calib_h100_cards25")
    cards = mod.brackets()
    assert json.loads(json.dumps(cards)) == rec["cards"]
    rows = rec["contradictions"]["isolated"]
    assert rows == mod.contradictions(cards, "isolated") and len(rows) == 6
    for r in rows:
        assert r["K_caught"] >= r["K_free"] and r["free_MiB"] > r["caught_MiB"]
        assert r["free_card"].startswith("GPU-1f4eeba2") and not r["caught_card"].startswith("GPU-1f4eeba2")


def test_h100_model_checks_stay_out_of_the_wheel_and_their_points_ship():
    import importlib.util
    where = Path(__file__).resolve().parents[1] / "cli" / "test_packaged_data.py"
    spec = importlib.util.spec_from_file_location("packaged_data_s25", where)
    packaged = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(packaged)
    shipped = {p.relative_to(EXTRA).as_posix() for p in packaged.shipped_files() if EXTRA in p.parents}
    assert "h100-pcie-host-fresh2/points.parquet" in shipped and "h100-pcie-host-fresh2/platform.json" in shipped
    assert not any(p.startswith("h100-") and p.endswith("/check.parquet") for p in shipped)
    # since session 27 no calibration-extra model check ships (regenerated from points.parquet and the platform)
    assert not any(p.endswith("/check.parquet") for p in shipped)
    assert "h200-pcie-host-fresh2/points.parquet" in shipped and "h200-pcie-host-fresh2/platform.json" in shipped


def test_call25_claims_count_pairs_on_the_right_side_of_each_line():
    claims = load_script("calib_call25").claims
    rows = [{"knee_ratio": r, "off": off} for r, off in
            [(0.8, False), (0.81, True), (3.0, True), (3.01, False), (None, True), (1.0, False), (1.01, True),
             (1.5, True), (1.51, True), (-2.0, True)]]
    c = claims(rows)
    assert (c["A_far"]["pairs"], c["A_far"]["pairs_off"]) == (3, 1)      # 0.8, 3.01, -2.0
    assert (c["B_near"]["pairs"], c["B_near"]["pairs_off"]) == (2, 2)    # 1.01, 1.5
    assert not c["A_far"]["met"] and c["B_near"]["met"] and c["verdict"] == "not met"
    assert claims([])["verdict"] == "not met"                          # no pair: nothing is met
