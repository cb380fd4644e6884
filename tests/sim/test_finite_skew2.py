"""The issue law fitted net of a measured start skew (skew13): ``fit_issue_time0_overlap(fit_skew=False)`` and the
post-hoc script's pieces (benchmarks/finite_skew2.py); the committed record's verdict recomputed from its rows."""

import json

import numpy as np
import pandas as pd
import pytest

from xstage.paths import data_dir
from xstage.sim.fit_two_stage import fit_issue_time0_overlap, overlap_t0

from .bench_scripts import load_script

RECORD = data_dir() / "calibration-extra" / "finite-skew2-s11-posthoc" / "posthoc.json"


def _grid():
    K, B = np.meshgrid([1, 4, 16, 64, 132], [1024, 4096, 16384, 65536])
    return K.ravel().astype(float), B.ravel().astype(float)


def test_fit_skew_false_pins_the_skew_at_zero_and_recovers_a_skewless_law():
    K, B = _grid()
    T = overlap_t0(K, B, 0.15, 1 / 60e3, 0.0)                 # no skew, no ceiling
    fit = fit_issue_time0_overlap(K, B, T, fit_skew=False)
    assert fit["start_skew_us"] == 0.0
    assert fit["t_fixed_us"] == pytest.approx(0.15, rel=0.02)
    assert fit["producer_issue_GBps"] == pytest.approx(60.0, rel=0.02)


def test_fit_skew_false_does_not_absorb_a_skew_the_free_fit_finds():
    K, B = _grid()
    T = overlap_t0(K, B, 0.05, 1 / 60e3, 0.0, skew=0.3)
    free, pinned = fit_issue_time0_overlap(K, B, T), fit_issue_time0_overlap(K, B, T, fit_skew=False)
    assert free["start_skew_us"] == pytest.approx(0.3, rel=0.05)
    assert pinned["start_skew_us"] == 0.0 and pinned["median_abs_rel_residual"] > free["median_abs_rel_residual"]


def test_skew_at_is_zero_for_one_producer_and_linear_between_points():
    fs2 = load_script("finite_skew2")
    pts = [[4, 0.1], [8, 0.2]]
    assert fs2.skew_at(pts, 1) == 0.0
    assert fs2.skew_at(pts, 6) == pytest.approx(0.15)
    assert fs2.skew_at(pts, 100) == pytest.approx(0.2)


def test_cli_refuses_an_existing_out_dir(tmp_path, capsys):
    fs2 = load_script("finite_skew2")
    assert fs2.main(["posthoc", str(tmp_path)]) == 2
    assert "OUT_DIR=" in capsys.readouterr().err


def test_committed_verdict_follows_from_its_rows():
    rec = json.loads(RECORD.read_text())
    f = pd.DataFrame(rec["runs"])
    meas = [c for c in f if c.startswith("meas_")]
    for target, s in rec["summary"].items():
        g = f[(f["target"] == target) & f["reproducible"]]
        for lab in ("pred", "new"):
            hits = sum(int(((g[f"T_iss_{lab}_us"] - g[m]).abs() / g[m] <= 0.10).sum()) for m in meas)
            assert hits == s["hits"][lab]["total"]
    assert rec["qualifies"] is False
    assert not rec["summary"]["local"]["not_worse"]
