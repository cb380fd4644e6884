"""The held-out page (``xstage.compare.heldout_frames``, ``xstage.dashboards.page_heldout``): on two committed
calibration folders, its per-folder figures are those ``xstage results calibration`` reports, its pairs are every
lockstep periodic pair of each folder, and the page draws the knee figure, one map per folder it names, and the
pairs that miss."""

import shutil
from pathlib import Path

import pytest

from xstage.compare.calibration_records import summarize_results
from xstage.compare.heldout_frames import FOLDER_KEYS, heldout_frames
from xstage.dashboards.page_heldout import MAP_FOLDERS, heldout_page, tables
from xstage.records import load_records

EXTRA = Path(__file__).resolve().parents[2] / "data" / "calibration-extra"
NAMES = ("h200-pcie-host-fresh14", "h200-local-wide-3525cba-two-stage-gated2")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("heldout-data")
    for name in NAMES:
        shutil.copytree(EXTRA / name, root / "calibration-extra" / name)
    return root


@pytest.fixture(scope="module")
def frames(data):
    return heldout_frames(data)


def test_folder_figures_are_the_results_commands(data, frames):
    folders = frames["folders"].set_index("folder")
    assert sorted(folders.index) == sorted(NAMES)
    for name in NAMES:
        want = summarize_results(data, platform=name)
        for key in FOLDER_KEYS:
            assert folders.loc[name, key] == pytest.approx(want[key], rel=1e-12), (name, key)
        assert folders.loc[name, "model"] == want["model"]


def test_pairs_are_every_lockstep_pair_with_its_split(data, frames):
    pairs = frames["pairs"]
    for name in NAMES:
        points, _ = load_records(data / "calibration-extra" / name / "points.parquet", "point")
        per = points[points["mode"] == "periodic"]
        want = {(int(k), int(b)): s for k, b, s in zip(per["producers"], per["bytes_per_producer"], per["split"])}
        got = pairs[pairs["folder"] == name]
        assert {(k, b) for k, b in zip(got["producers"], got["bytes_per_producer"])} == set(want)
        assert all(s == want[(k, b)] for k, b, s in zip(got["producers"], got["bytes_per_producer"], got["split"]))
    host = pairs[pairs["folder"] == "h200-pcie-host-fresh14"].set_index(["producers", "KiB"])
    assert host.loc[(79, 29.0), "median_rel_err_T_iss"] < -0.15 and host.loc[(79, 29.0), "knee_ratio"] > 0.9


def test_the_page_draws_the_knee_figure_the_named_maps_and_the_misses(frames):
    page = heldout_page(frames)
    text = "".join(page.blocks)
    n_maps = len([f for f in MAP_FOLDERS if f in NAMES])
    assert n_maps == 2 and page.figures == 1 + n_maps and not page.nodata
    assert text.count("median T_iss error per (K, B) pair") == n_maps
    assert "held-out T_iss error against the knee ratio" in text
    miss = tables(frames)["held-out pairs with a point off by more than 15 %"]
    assert len(miss) == int(frames["folders"]["heldout_n_miss_pairs"].sum())
    assert set(miss["split"]) == {"heldout"} and (miss["n_off"] > 0).all()


def test_no_split_no_figure(tmp_path):
    empty = heldout_frames(tmp_path)
    assert empty["pairs"].empty and empty["folders"].empty and tables(empty) == {}
    assert heldout_page(empty).nodata
