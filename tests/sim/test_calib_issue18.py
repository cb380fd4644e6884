"""``benchmarks/calib_issue18.py`` (session 18, post hoc): the issue-law stand-ins (recording, then returning a copy
of the recorded law whatever they are given; the modules restored after), the broad grids' issue law recomputed to
the committed terms, the committed score read back from its rows under the rule of
data/calibration-extra/issue18-criterion.md, and an existing ``--json`` refused before any fit."""
import json
import types

import pytest

from .bench_scripts import load_script

i18 = load_script("calib_issue18")
SCORES = i18.EXTRA / "issue18-posthoc.json"


def test_the_stand_ins_record_then_return_a_copy_of_the_fixed_law_and_restore_the_modules():
    saved = {m: getattr(i18.platform_fit, m) for m in i18.FITTERS}
    with i18.stands({m: {"store_buffer_bytes": 4096.0} for m in i18.FITTERS}):
        fit = i18.platform_fit.fit_two_stage.fit_issue_time0_overlap
        got = fit([1, 2], [3, 4], [5, 6], 0.0)
        got["store_buffer_bytes"] = -1.0                      # the fit mutates what it gets: the next call is intact
        assert fit() == {"store_buffer_bytes": 4096.0}
        assert i18.platform_fit.calib_fit.fit_drain_rate is saved["calib_fit"].fit_drain_rate   # others: the module's
    assert all(getattr(i18.platform_fit, m) is saved[m] for m in i18.FITTERS)
    mod = types.SimpleNamespace(fit_issue_time0=lambda *a: {"n": len(a)})
    rec = i18._Stand(mod, "fit_issue_time0")
    assert rec.fit_issue_time0(1, 2, 3) == {"n": 3} and rec.last == {"n": 3}


def test_the_broad_issue_law_is_the_committed_one_and_no_knee_folder_shares_a_pair():
    s = json.loads(SCORES.read_text())
    law = i18.broad_issue_law()["fit_two_stage"]
    for k, v in s["issue_law"].items():
        assert law.get(k) == pytest.approx(v, rel=1e-9) if v is not None else law.get(k) is None
    assert s["issue_law"]["store_buffer_bytes"] < max(i18.platform_fit.BUFFERS)       # not at its search bound
    assert s["shared_pairs"] == {g: [] for g in i18.FOLDERS}


def test_the_committed_score_reads_back_from_its_rows():
    s = json.loads(SCORES.read_text())
    rows = s["rows"]
    assert s["post_hoc"] is True and len(rows) == len(i18.FOLDERS) * 5
    for r in rows:
        assert r["all_four"] == (r["heldout_median_rel_err_T_iss"] <= 0.05 and r["heldout_p90_rel_err_T_iss"] <= 0.15
                                 and r["heldout_median_rel_err_period"] <= 0.05
                                 and r["heldout_p90_rel_err_period"] <= 0.15)
    assert s["decision"] == i18.decide(rows)
    four = {g: 4 for g in i18.FOLDERS}
    assert i18.decide([{"grid": g, "all_four": k < n} for g, n in four.items() for k in range(5)])["ready"] is True
    assert i18.decide([{"grid": g, "all_four": k < n} for g, n in {**four, "fresh14": 3}.items()
                       for k in range(5)])["ready"] is False


def test_an_existing_json_is_one_line_and_exit_2_before_any_fit(tmp_path, capsys):
    taken = tmp_path / "scores.json"
    taken.write_text("{}")
    with pytest.raises(SystemExit) as stop:
        i18.main(["--json", str(taken)])
    assert stop.value.code == 2 and taken.read_text() == "{}"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "calib_issue18: error: --json" in err[0]


def test_the_committed_insample_bound_reads_back_and_fresh14_misses_even_fitted_on_every_point():
    s = json.loads((i18.EXTRA / "issue18-insample-posthoc.json").read_text())
    rows = s["rows"]
    assert s["post_hoc"] is True and len(rows) == len(i18.FOLDERS) * 2 * 5
    assert s["seeds_met"] == {f"{g} {i}": sum(r["all_four"] for r in rows if (r["grid"], r["issue_law"]) == (g, i))
                              for g in i18.FOLDERS for i in ("own", "broad")}
    assert s["seeds_met"]["fresh14 own"] < 4 and s["seeds_met"]["fresh14 broad"] < 4
    worst = {(r["seed"], r["issue_law"]): {(k, b): e for k, b, e, *_ in r["misses"]} for r in rows
             if r["grid"] == "fresh14"}
    assert all(e < -0.25 for m in worst.values() for (k, b), e in m.items() if (k, b) == (79, 29))
