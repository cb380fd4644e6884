"""The pre-registered lockstep finite runs (benchmarks/finite_runs_drained.py): the committed predictions are what
``xstage sim bursts --mode lockstep`` gives for their grid, and the score compares like with like."""

import json

import pandas as pd
import pytest

from xstage.paths import data_dir

from .bench_scripts import load_script

PRED = data_dir() / "calibration-extra" / "lockstep-drained-s8-predictions.json"


def test_committed_predictions_are_the_simulators_answers():
    fd = load_script("finite_runs_drained")
    rec = json.loads(PRED.read_text())
    assert rec["grid"] == fd.GRID and rec["trials"] == fd.TRIALS
    for key in ("host v1", "local two-stage-gated"):
        p = rec["predictions"][key]
        for r in p["runs"][:4]:
            s = fd._cli(["sim", "bursts", "-p", p["platform"], "-K", str(r["K"]), "-B", str(r["B"]), "-G", "0",
                         "-n", str(r["n"]), "--mode", "lockstep", "--barrier-us", repr(p["barrier_us"]),
                         "--skip", str(r["n"] // 2)])
            for f in fd.FIGURES:
                assert s[f] == pytest.approx(r[f], rel=1e-12)


def test_score_reads_the_median_over_trials(tmp_path):
    fd = load_script("finite_runs_drained")
    pred = {"rule": "x", "predictions": {"host v1": {"barrier_us": 1.0, "runs": [
        {"K": 8, "B": 4096, "n": 8, "T_iss_us": 1.0, "period_us": 2.0, "drained_us": 16.0, "drain_bound": False},
        {"K": 16, "B": 4096, "n": 8, "T_iss_us": 1.0, "period_us": 2.0, "drained_us": 16.0, "drain_bound": True}]}}}
    rows = [{"target": "host", "K": 8, "B": 4096, "n": 8, "trial": t, "T_iss_us": v, "period_us": 2.0,
             "drained_us": 20.0, "kernel_us": 30.0} for t, v in enumerate((1.0, 1.1, 5.0))]
    pd.DataFrame(rows).to_csv(tmp_path / "runs.csv", index=False)
    s = fd.score(tmp_path, pred)["scores"]["host v1"]
    assert s["n_runs"] == 1                     # a run not measured is not scored
    run = s["runs"][0]
    assert run["T_iss_us_meas"] == pytest.approx(1.1) and run["drained_us_rel_err"] == pytest.approx(-0.2)
    assert s["all"]["drained_us"]["within_10pct"] == 0.0 and s["all"]["period_us"]["within_10pct"] == 1.0
    assert "drain_bound" not in s and s["barrier_paced"]["T_iss_us"]["n"] == 1


@pytest.mark.parametrize("run_name, scores", [("lockstep-drained-bb34da7", "lockstep-drained-s8-scores.json"),
                                              ("lockstep-drained-3f89e3d", "lockstep-drained-s9-scores.json")])
def test_committed_scores_are_the_committed_run_scored_against_the_committed_predictions(run_name, scores):
    fd = load_script("finite_runs_drained")
    extra = data_dir() / "calibration-extra"
    run = extra / run_name
    meta = json.loads((run / "meta.json").read_text())
    assert meta["provenance"]["git_commit"].startswith(run_name.rsplit("-", 1)[1]) and not meta["skipped_for_budget"]
    # the session-9 re-run: the same grid, the session-8 predictions, measured after its pre-registration
    assert json.loads(PRED.read_text())["provenance"]["date"] < meta["provenance"]["date"]
    rec = json.loads((extra / scores).read_text())
    got = fd.score(run, json.loads(PRED.read_text()))
    for key, s in rec["scores"].items():
        assert got["scores"][key]["n_runs"] == s["n_runs"] == 30
        for sub in ("all", "drain_bound", "barrier_paced"):
            for fig in fd.FIGURES:
                if sub in s:
                    assert got["scores"][key][sub][fig] == pytest.approx(s[sub][fig], rel=1e-12)
