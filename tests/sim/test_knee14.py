"""knee14 (issue 15, session 12): the ``bracket`` split -- the ``pairs`` rule with every gap-swept pair kept in the
fit half (``xstage.sim.split_sweeps.split_pairs_bracket``, ``xstage calibrate --split-rule bracket``)."""
import json

import numpy as np
import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.paths import data_dir
from xstage.records import load_records
from xstage.sim.platform_fit import split_pairs
from xstage.sim.split_sweeps import BRACKET_RULE, split_by_rule, split_pairs_bracket

from .fresh10 import fresh10_points, own_fit_p90

KiB = 1024
EXTRA = data_dir() / "calibration-extra"
FRESH10 = EXTRA / "h200-pcie-host-fresh10"


def _grid():
    """K = 10: periodic B 1-7 KiB, gap sweeps at 3 and 4 KiB, isolated-only 8-11 KiB; K = 20: periodic 1-3 KiB."""
    rows = []
    for k, sizes, swept in ((10, range(1, 8), (3, 4)), (20, range(1, 4), ())):
        for b in sizes:
            rows += [{"producers": k, "bytes_per_producer": b * KiB, "mode": "periodic", "phase": ph}
                     for ph in ("rate", "plateau")] + [{"producers": k, "bytes_per_producer": b * KiB,
                                                         "mode": "isolated", "phase": "isolated"}]
            if b in swept:
                rows += [{"producers": k, "bytes_per_producer": b * KiB, "mode": "periodic", "phase": "gap"}] * 3
    rows += [{"producers": 10, "bytes_per_producer": b * KiB, "mode": "isolated", "phase": "isolated"}
             for b in (8, 9, 10, 11)]
    return pd.DataFrame(rows)


def _held(points, split):
    return sorted({(int(k), int(b) // KiB) for k, b, s in zip(points["producers"], points["bytes_per_producer"], split)
                   if s == "heldout"})


def test_bracket_exact_small_case():
    points = _grid()
    # K = 10 periodic: 7 pairs, round(2.1) = 2 held out of {2, 5, 6} (1, 7 the extremes; 3, 4 swept);
    # K = 10 isolated-only: 4 pairs, round(1.2) = 1 of {9, 10}; K = 20: 3 pairs, round(0.9) = 1 of {2}
    assert _held(points, split_pairs_bracket(points, 0.3, 0)) == [(10, 5), (10, 6), (10, 9), (20, 2)]
    assert _held(points, split_pairs_bracket(points, 0.3, 1)) == [(10, 2), (10, 5), (10, 10), (20, 2)]
    for seed in range(6):
        held = set(_held(points, split_pairs_bracket(points, 0.3, seed)))
        assert not held & {(10, 1), (10, 7), (10, 3), (10, 4), (10, 8), (10, 11), (20, 1), (20, 3)}
        assert len(held) == 4
    # a large fraction holds out every candidate, never a swept pair or an extreme
    assert _held(points, split_pairs_bracket(points, 0.9, 0)) == [(10, 2), (10, 5), (10, 6), (10, 9), (10, 10),
                                                                  (20, 2)]
    assert set(split_pairs_bracket(points, 0.0, 0)) == {"fit"}
    # whole pairs: every point of a pair on one side
    s = split_pairs_bracket(points, 0.3, 2)
    assert all(len(set(g)) == 1 for _, g in s.groupby([points["producers"], points["bytes_per_producer"]]))


def test_bracket_without_gap_sweeps_is_pairs():
    points = _grid()
    points = points[points["phase"] != "gap"].reset_index(drop=True)
    for seed in range(4):
        assert (split_pairs_bracket(points, 0.3, seed) == split_pairs(points, 0.3, seed)).all()
    assert (split_by_rule(points, "bracket", 0.3, 1) == split_pairs_bracket(points, 0.3, 1)).all()
    with pytest.raises(InputError, match="split_rule"):
        split_by_rule(points, "knee")


def test_fresh10_bracket_keeps_the_knee_sweeps_fitted():
    points, _ = load_records(FRESH10 / "points.parquet", "point")
    points = points.reset_index(drop=True)
    swept = {(116, 26), (116, 44), (84, 26), (84, 36), (58, 36), (58, 44), (34, 44), (34, 88)}
    assert _held(points, split_pairs_bracket(points, 0.3, 0)) == [
        (9, 44), (9, 88), (34, 16), (34, 36), (58, 16), (58, 88), (84, 44), (84, 88), (116, 36), (116, 88)]
    for seed in range(5):
        held = _held(points, split_pairs_bracket(points, 0.3, seed))
        assert len(held) == 10 and not set(held) & swept
        assert all(b not in (6, 150, 64) for _, b in held)


def test_refit_with_split_rule_records_the_rule(tmp_path, capsys):
    from xstage.cli import main
    out = tmp_path / "o"
    assert main(["calibrate", "--refit", "--records", str(FRESH10), "--split-rule", "bracket", "--split-seed", "3",
                 "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["split_rule"] == "bracket" and summary["split"]["rule"] == BRACKET_RULE
    assert summary["heldout_fraction"] == 0.3 and summary["split_seed"] == 3
    points, meta = load_records(out / "points.parquet", "point")
    assert meta["config"]["split_rule"] == "bracket"
    assert _held(points, points["split"]) == _held(points, split_pairs_bracket(points.reset_index(drop=True), 0.3, 3))
    assert "bracket" not in json.dumps(summary["split"]["heldout_pairs"])
    assert "every gap-swept pair" in json.loads((out / "platform.json").read_text())["notes"]["heldout_split"]


def test_default_split_rule_is_unchanged(tmp_path, capsys):
    from xstage.cli import main
    out = tmp_path / "o"
    assert main(["calibrate", "--refit", "--records", str(FRESH10), "--heldout-fraction", "0.3", "--split-seed", "2",
                 "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    points, meta = load_records(out / "points.parquet", "point")
    assert "split_rule" not in summary and "split_rule" not in meta["config"]
    assert _held(points, points["split"]) == _held(points, split_pairs(points.reset_index(drop=True), 0.3, 2))


def test_bad_split_rule_is_one_line_exit_2(tmp_path, capsys):
    from xstage.cli import main
    rc = main(["calibrate", "--refit", "--records", str(FRESH10), "--split-rule", "knee", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--split-rule" in err and "knee" in err


def test_a_sweep_on_the_simulator_records_the_bracket_split(tmp_path, capsys):
    from xstage.cli import main
    out = tmp_path / "o"
    assert main(["calibrate", "--sim", "paper-b200", "--target", "host", "--grid", "fresh10", "--quick",
                 "--split-rule", "bracket", "--out", str(out), "--quiet", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    points, meta = load_records(out / "points.parquet", "point")
    assert meta["config"]["split_rule"] == "bracket" and summary["split_rule"] == "bracket"
    swept = {(int(k), int(b) // KiB) for k, b, ph in zip(points["producers"], points["bytes_per_producer"],
                                                         points["phase"]) if ph == "gap"}
    held = _held(points, points["split"])
    assert swept == {(116, 26), (58, 44)} and held and not set(held) & swept
    assert held == _held(points, split_pairs_bracket(points.reset_index(drop=True), 0.3, 0))


def test_committed_record_decides_by_its_own_rows_and_a_seed_1_row_recomputes():
    record = json.loads((EXTRA / "knee14-posthoc.json").read_text())
    assert record["post_hoc"] is True and record["provenance"]["git_commit"]
    p90 = {(r["model"], r["grid"], r["split"]): r["heldout_p90_rel_err_T_iss"] for r in record["score_rows"]}
    others = ("wide", "fresh", "fresh2", "fresh3", "fresh5", "wide-3525cba")
    decision = record["decision"]
    for m in ("two-stage-gated2", "two-stage-state", "two-stage-kneek"):
        met = sum(p90[(m, "fresh10", f"bracket seed {s}")] <= 0.15 for s in range(5))
        held = all(p90[(m, g, "bracket seed 0")] <= max(0.15, p90[(m, g, "recorded")] + 0.005) for g in others)
        assert decision["per_model"][m]["fresh10_seeds_met"] == met == 3
        assert decision["per_model"][m]["qualified"] is (met >= 4 and held) is False
    assert decision["qualified"] is False and decision["model"] is None
    # the reference rows are knee13's (same code path): gated2 on fresh10 at split_pairs seed 1, 62.7 %
    assert round(p90[("two-stage-gated2", "fresh10", "pairs seed 1")], 3) == 0.627
    # fresh10 under bracket seed 1, gated2's own fit half, refitted now
    points = fresh10_points()
    split = split_pairs_bracket(points, 0.3, 1).reset_index(drop=True)
    assert np.isclose(own_fit_p90(points, split, "two-stage-gated2"),
                      p90[("two-stage-gated2", "fresh10", "bracket seed 1")], rtol=1e-9)
