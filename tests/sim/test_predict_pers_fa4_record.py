"""The persistent-FA4 held-out record reloads, its rows are the predictor's answers under its rule, and its laws
are fa-heldout-v2's (nothing refitted on these runs)."""

import json

from xstage.paths import data_dir

from .pers_fa4_checks import check_summary, check_verdict_rows

RECORD = data_dir() / "predictions" / "fa4-persistent-heldout-h200-pcie-host.json"


def test_rows_are_the_predictors_answers_with_the_fa4_law():
    rec = json.loads(RECORD.read_text())
    check_verdict_rows(rec, "fa4_law", rec["rows"][::5], lambda r: r["kw"])


def test_laws_are_the_recorded_fit_and_the_rule_holds():
    rec = json.loads(RECORD.read_text())
    v2 = json.loads((data_dir() / rec["laws_from"]).read_text())
    assert rec["laws"] == {fam: v2["laws"][fam] for fam in ("fa4", "triton")}
    for r in rec["rows"]:
        if r["kind"] == "persistent":
            stagger = "stagger" in r["kernel"]
            assert (r["kw"]["send"], r["kw"]["send_step_offset"]) == (("stagger", 1) if stagger else ("tile_end", 0))
            assert (r["kw"]["order"] == "local_last") == ("ll" in r["kernel"])
    check_summary(rec, "fa4_law", "all persistent", [r for r in rec["rows"] if r["kind"] == "persistent"])
