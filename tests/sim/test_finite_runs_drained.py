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


def _runs_csv(folder, values):
    """A lockstep_drained.py-shaped runs.csv: one run per (K, T_iss) of ``values``, two trials each."""
    folder.mkdir()
    rows = [{"target": "host", "K": K, "B": 4096, "n": 8, "trial": t, "T_iss_us": v, "period_us": 2.0,
             "drained_us": 20.0, "kernel_us": 30.0} for K, v in values for t in (0, 1)]
    pd.DataFrame(rows).to_csv(folder / "runs.csv", index=False)
    return folder


def test_repeat_score_scores_each_measurement_as_the_prediction_of_another(tmp_path):
    fr = load_script("finite_runs_repeat")
    a = _runs_csv(tmp_path / "a", [(8, 1.00), (16, 1.00)])
    b = _runs_csv(tmp_path / "b", [(8, 1.05), (16, 1.30)])    # run K=16 does not reproduce
    pred = {"rule": "x", "predictions": {"host v1": {"barrier_us": 1.0, "runs": [
        {"K": 8, "B": 4096, "n": 8, "T_iss_us": 1.2, "period_us": 2.0, "drained_us": 20.0, "drain_bound": False},
        {"K": 16, "B": 4096, "n": 8, "T_iss_us": 1.0, "period_us": 2.0, "drained_us": 20.0, "drain_bound": False}]}}}
    s = fr.score(pred, [a, b])
    ag = s["agreement"]["host T_iss_us"]
    assert ag["pairs"] == {"a vs b": 0.5, "b vs a": 0.5} and ag["reproducible"] == [[8, 4096, 8]]
    assert ag["not_reproducible"] == {"16 4096 8": [1.0, 1.3]}
    assert s["agreement"]["host period_us"]["mean_share"] == 1.0
    t = s["predictions"]["host v1"]["T_iss_us"]
    assert t["per_measurement"]["a"]["within_10pct"] == 0.5          # K=16 hit on a, K=8 (+20 %) missed
    assert t["consensus"]["within_10pct"] == 0.0                     # consensus 1.025 and 1.15
    assert t["reproducible_consensus"]["n"] == 1 and t["reproducible_consensus"]["within_10pct"] == 0.0
    assert set(t["misses_on_consensus"]) == {"8 4096 8", "16 4096 8"}


def test_repeat_score_refuses_bad_input_in_one_line(tmp_path, capsys):
    fr = load_script("finite_runs_repeat")
    a = _runs_csv(tmp_path / "a", [(8, 1.0)])
    assert fr.main(["score", str(PRED), str(tmp_path / "o.json"), str(a), str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert fr.main(["score", str(PRED), str(tmp_path / "o.json"), str(a), str(a)]) == 2
    assert "folder names repeat" in capsys.readouterr().err and not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("scores, runs", [
    ("lockstep-repeat-s10-scores.json", ["lockstep-repeat-6406bd8-r1", "lockstep-repeat-6406bd8-r2",
                                         "lockstep-repeat-6406bd8-r3"]),
    ("lockstep-repeat-s10-scores-with-3f89e3d.json", ["lockstep-repeat-6406bd8-r1", "lockstep-repeat-6406bd8-r2",
                                                      "lockstep-repeat-6406bd8-r3", "lockstep-drained-3f89e3d"])])
def test_committed_repeat_scores_are_the_committed_runs_scored(scores, runs):
    fr = load_script("finite_runs_repeat")
    extra = data_dir() / "calibration-extra"
    prereg = (extra / "lockstep-repeat-s10-preregistration.md").read_text()
    assert "lockstep_repeat.sh" in prereg
    for r in runs[:3]:   # measured after the pre-registration (committed 2026-12-02T09:44:19Z)
        assert json.loads((extra / r / "meta.json").read_text())["provenance"]["date"] > "2026-12-02T09:44:19"
    rec = json.loads((extra / scores).read_text())
    got = fr.score(json.loads(PRED.read_text()), [extra / r for r in runs])
    assert got["agreement"] == rec["agreement"]
    for key, res in rec["predictions"].items():
        for fig, r in res.items():
            assert got["predictions"][key][fig]["consensus"] == pytest.approx(r["consensus"], rel=1e-12)
            for m, e in r["per_measurement"].items():
                assert got["predictions"][key][fig]["per_measurement"][m] == pytest.approx(e, rel=1e-12)
