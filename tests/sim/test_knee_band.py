"""knee-band25, knee-band26 and knee-band28 (sim/knee_band.py, benchmarks/calib_knee_band25.py): each record follows
from the committed points, a ratio finds its bin (tests/cli/test_model_knee_band.py: `xstage model`, which reads
knee-band28)."""

import json
import math

import pytest

from xstage.paths import data_dir
from xstage.sim.knee_band import BINS, band_rows, bin_label

from .bench_scripts import load_script

RECORD = data_dir() / "calibration-extra" / "knee-band25.json"
RECORD26 = data_dir() / "calibration-extra" / "knee-band26.json"
RECORD28 = data_dir() / "calibration-extra" / "knee-band28.json"


def test_bins_tile_the_line_without_gaps():
    assert BINS[0][0] == -math.inf and BINS[-1][1] == math.inf
    assert all(a[1] == b[0] for a, b in zip(BINS, BINS[1:]))
    assert bin_label(*BINS[0]) == "(-inf, 0.5]" and bin_label(1.0, 1.1) == "(1, 1.1]"


@pytest.mark.parametrize("record,which", [(RECORD, {}), (RECORD26, {"with_call25": True}),
                                          (RECORD28, {"later": True})])
def test_record_follows_from_the_committed_points(record, which):
    rec = json.loads(record.read_text())
    mod = load_script("calib_knee_band25")
    for gpu, combos in mod.combos(**which).items():
        assert [list(c) for c in combos] == rec["gpus"][gpu]["combos"], gpu
        rows = [r for c in combos for r in mod.pair_rows(*c)]
        assert json.loads(json.dumps(mod.table(rows))) == rec["gpus"][gpu]["bins"], gpu
        assert rec["gpus"][gpu]["n_pairs"] == len(rows)


def test_knee_band26_adds_call25s_three_h100_folders_and_nothing_else():
    old, new = (json.loads(r.read_text())["gpus"] for r in (RECORD, RECORD26))
    assert new["H200"] == old["H200"]
    added = [c for c in new["H100"]["combos"] if c not in old["H100"]["combos"]]
    assert added == [["h100-pcie-host-pool24", f"h100-pcie-host-fresh{g}"] for g in (11, 12, 13)]
    assert new["H100"]["n_pairs"] == old["H100"]["n_pairs"] + 145   # call25-scores.json: 145 lockstep pairs


def test_knee_band28_adds_the_24_later_h100_folders_at_their_median_rate():
    old, new = (json.loads(r.read_text())["gpus"] for r in (RECORD26, RECORD28))
    assert new["H200"] == old["H200"]
    added = [c for c in new["H100"]["combos"] if c not in old["H100"]["combos"]]
    assert len(added) == 24 and all(p == "h100-pcie-host-pool24" and rate == "median" for p, _, rate in added)
    assert len({f for _, f, _ in added}) == 24
    bins = {b["bin"]: b for b in new["H100"]["bins"]}
    assert (new["H100"]["n_pairs"], bins["(1, 1.1]"]["pairs_off"], bins["(1, 1.1]"]["pairs"]) == (1499, 78, 83)
    assert max(bins[b]["share_off"] for b in ("(-inf, 0.5]", "(0.5, 0.8]", "(3, inf]")) <= 0.06   # far: it holds


def test_the_figures_the_docs_quote_are_the_records():
    bins = {gpu: {b["bin"]: b for b in e["bins"]} for gpu, e in json.loads(RECORD.read_text())["gpus"].items()}
    assert (bins["H200"]["(1, 1.1]"]["pairs_off"], bins["H200"]["(1, 1.1]"]["pairs"]) == (24, 24)
    for gpu in ("H200", "H100"):
        assert bins[gpu]["(1, 1.1]"]["share_off"] >= 0.85
        assert max(bins[gpu][b]["share_off"] for b in ("(-inf, 0.5]", "(0.5, 0.8]", "(3, inf]")) <= 0.12


@pytest.mark.parametrize("ratio,label", [(1.0, "(0.9, 1]"), (1.0000001, "(1, 1.1]"), (-7.0, "(-inf, 0.5]"),
                                         (40.0, "(3, inf]")])
def test_a_ratio_finds_its_bin_for_each_gpu(ratio, label):
    rows = band_rows(json.loads(RECORD.read_text()), ratio)
    assert set(rows) == {"H200", "H100"} and {r["bin"] for r in rows.values()} == {label}


@pytest.mark.parametrize("ratio", [None, math.nan, math.inf])
def test_no_row_without_a_finite_ratio(ratio):
    assert band_rows(json.loads(RECORD.read_text()), ratio) == {}
