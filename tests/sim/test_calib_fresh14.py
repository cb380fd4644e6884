"""``benchmarks/calib_fresh14.py`` (session 17): the pre-registered score of ``xstage calibrate --repeat 2`` on
``--grid fresh14``, run before the device call on a stand-in folder the product's own command wrote on the simulator
(the committed wide-fitted gated host platform): the two runs come back from points-runs.parquet, the primary refits
through the product at seeds 0-4, the study's median fit gives the product's figures, and a folder of one run is
"not measured"."""
import json

import pytest

from xstage.cli import main

from .bench_scripts import load_script

f14 = load_script("calib_fresh14")
PLATFORM = f14.EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json"


def _sweep(out, *extra):
    assert main(["calibrate", "--target", "host", "--sim", str(PLATFORM), "--grid", "fresh14", "--model",
                 "two-stage-lockq", "--split-rule", "bracket", "--no-copy", "--out", str(out), "--quiet",
                 *extra]) == 0


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    out = tmp_path_factory.mktemp("f14") / "h200-pcie-host-fresh14"
    _sweep(out, "--repeat", "2")
    return out, f14.score(out, log=lambda *a, **k: None)


def test_the_score_reads_both_runs_and_refits_through_the_product(scored, capsys):
    out, s = scored
    capsys.readouterr()
    assert s["runs"] == ["r1", "r2"] and [r["seed"] for r in s["primary"]] == [0, 1, 2, 3, 4]
    assert s["decision"]["verdict"] in ("met", "not met")
    assert s["decision"]["seeds_met"] == sum(r["all_four"] for r in s["primary"])
    assert s["study_matches_product"] is True
    summary = json.loads((out / "summary.json").read_text())      # the command's own seed-0 fit is the primary's
    assert summary["heldout_p90_rel_err_T_iss"] == pytest.approx(s["primary"][0]["heldout_p90_rel_err_T_iss"],
                                                                 rel=1e-12)
    assert set(s["reported"]) == {"repeat-median judged on r1", "repeat-median judged on r2", "lockq on r1 alone",
                                  "lockq on r2 alone"}


def test_one_run_is_not_measured(tmp_path):
    out = tmp_path / "one"
    _sweep(out)
    s = f14.score(out, log=lambda *a, **k: None)
    assert s["decision"] == {"rule": f14.RULE, "seeds_met": None, "verdict": "not measured"}
    assert s["primary"] == [] and s["rows"] == []


def test_an_existing_json_is_one_line_and_exit_2_before_any_fit(tmp_path, capsys):
    taken = tmp_path / "scores.json"
    taken.write_text("{}")
    with pytest.raises(SystemExit) as stop:
        f14.main(["score", "--records", str(tmp_path / "none"), "--json", str(taken)])
    assert stop.value.code == 2 and taken.read_text() == "{}"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "calib_fresh14: error: --json" in err[0] and str(taken) in err[0]
