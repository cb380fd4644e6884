"""The persistent-FA4 drift record: its verdict column is the predictor's answer under the third rule (persistent
programs spread at the Triton FA-only kernel's tile-log drift, stock FA4 none), and every earlier rule's column
equals the first record's (the drift changed no other prediction)."""

import json

from xstage.paths import data_dir

from .pers_fa4_checks import check_first_rule_columns, check_summary, check_verdict_rows

DIR = data_dir() / "predictions"
RECORD = DIR / "fa4-persistent-drift-h200-pcie-host.json"
FIRST = DIR / "fa4-persistent-heldout-h200-pcie-host.json"
LAWS = DIR / "fa-heldout-v2-h200-pcie-host.json"


def test_verdict_rows_are_the_predictors_answers_under_the_drift_rule():
    rec = json.loads(RECORD.read_text())
    assert rec["verdict_key"] == "fa4_law_drift"
    s = json.loads(LAWS.read_text())["tile_spreads"]["fa"]
    assert rec["program_spread_persistent"] == s
    def rule(r):  # the third rule: persistent programs spread by s, stock FA4 none
        return s if r["kind"] == "persistent" else 0.0

    sampled = rec["rows"][::3]
    assert all(r["program_spread"] == rule(r) for r in sampled)
    check_verdict_rows(rec, "fa4_law_drift", sampled,
                       lambda r: {**r["kw"], "program_spread": rule(r), "fa_program_spread": rule(r)})
    check_summary(rec, "fa4_law_drift", "all persistent", [r for r in rec["rows"] if r["kind"] == "persistent"])


def test_earlier_rule_columns_are_the_first_records():
    check_first_rule_columns(json.loads(RECORD.read_text()), json.loads(FIRST.read_text()))
