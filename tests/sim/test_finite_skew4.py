"""The same-process skew probe's score (benchmarks/finite_skew4.py, session 12, skew17): the verdict's two rules on a
hand-made frame, the refusals, and the committed record's figures recomputed from the committed records."""

import json

import pandas as pd
import pytest

from xstage.paths import data_dir

from .bench_scripts import load_script

EXTRA = data_dir() / "calibration-extra"


def _frame(probe_hits: dict, pred_hits: dict, n=10, small=True):
    """Local rows: per repeat n reproducible runs (B 2 KiB if small), the first probe_hits[rep] hit by the probe
    rule, the first pred_hits[rep] by the committed predictions."""
    rows = []
    for rep in probe_hits:
        for i in range(n):
            rows.append({"repeat": rep, "target": "local", "K": 4 + i, "B": 2048 if small else 65536, "n": 8,
                         "span_law_applies": small, "reproducible": True, "skew_meas_us": 0.16,
                         "probe_skew_us": 0.192, "hit_probe": i < probe_hits[rep], "hit_pred": i < pred_hits[rep],
                         "hit_perfect": True})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("probe, pred, rule1, rule2", [
    ({"r1": 10, "r2": 10}, {"r1": 9, "r2": 9}, True, True),
    ({"r1": 10, "r2": 9}, {"r1": 9, "r2": 9}, False, True),      # not more on r2
    ({"r1": 10, "r2": 9}, {"r1": 8, "r2": 8}, True, True),       # 19 of 20 = 95 %: enough
    ({"r1": 9, "r2": 9}, {"r1": 8, "r2": 8}, True, False),       # 18 of 20 = 90 %: not
])
def test_verdict_needs_more_hits_on_every_repeat_and_95pct_of_small_runs(probe, pred, rule1, rule2):
    fs4 = load_script("finite_skew4")
    s = fs4.summarize(_frame(probe, pred))["local"]
    assert s["rule1_probe_more_every_repeat"] is rule1 and s["rule2_share_at_least_95pct"] is rule2
    assert s["supported"] is (rule1 and rule2)
    assert s["hits_reproducible_pooled"]["B <= 24 KiB"] == {"of": 20, "pred": sum(pred.values()),
                                                           "probe": sum(probe.values()), "perfect": 20}
    assert s["probe_vs_own_skew_ticks"]["median"] == pytest.approx(1.0)


def test_score_refuses_records_without_a_probe_and_an_existing_output(tmp_path, capsys):
    fs4 = load_script("finite_skew4")
    run = EXTRA / "lockstep-repeat-6406bd8-r1"
    assert fs4.main(["score", str(tmp_path / "s.json"), str(run)]) == 2
    assert "no probe/runs.csv" in capsys.readouterr().err
    (tmp_path / "s.json").write_text("{}")
    assert fs4.main(["score", str(tmp_path / "s.json"), str(run)]) == 2
    assert "exists" in capsys.readouterr().err and json.loads((tmp_path / "s.json").read_text()) == {}


RECORD = EXTRA / "skew17-scores" / "scores.json"
REPEATS = [f"lockstep-probe-cda4ebb-r{i}" for i in (1, 2, 3)]


def test_recorded_probe_skew_follows_from_its_bursts():
    fs4 = load_script("finite_skew4")
    rec = json.loads(RECORD.read_text())
    s = fs4.probe_skews(EXTRA / REPEATS[0])
    assert len(s) == 34 and s[("local", 16)] == pytest.approx(rec["probe_skews_us"][REPEATS[0]]["local 16"])
    assert s[("local", 16)] == pytest.approx(0.288)


def test_committed_score_is_the_committed_records_scored():
    fs4 = load_script("finite_skew4")
    rec = json.loads(RECORD.read_text())
    got = fs4.score([EXTRA / r for r in REPEATS])
    assert got["summary"] == rec["summary"]
    loc = rec["summary"]["local"]
    assert loc["hits_per_repeat"]["probe"] == dict(zip(REPEATS, (28, 29, 27)))
    assert loc["hits_per_repeat"]["pred"] == dict(zip(REPEATS, (25, 27, 24)))
    assert loc["hits_reproducible_pooled"]["B <= 24 KiB"] == {"of": 48, "pred": 44, "probe": 46, "perfect": 48}
    assert rec["supported"] is True and rec["summary"]["host"]["supported"] is False
    f = pd.DataFrame(rec["runs"])
    h = f[(f["target"] == "host") & f["reproducible"]]
    assert (int(h["hit_probe"].sum()), int(h["hit_pred"].sum()), len(h)) == (79, 80, 87)
