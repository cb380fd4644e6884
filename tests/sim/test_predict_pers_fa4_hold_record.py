"""The persistent-FA4 hold record: its verdict column is the predictor's answer under the second rule (persistent
kernels hold their SM at the next epilogue, stock FA4 at the issue), and every first-rule column equals the
first record's (the default hold changed no prediction)."""

import json

from xstage.paths import data_dir

from .pers_fa4_checks import check_first_rule_columns, check_summary, check_verdict_rows

DIR = data_dir() / "predictions"
RECORD = DIR / "fa4-persistent-hold-h200-pcie-host.json"
FIRST = DIR / "fa4-persistent-heldout-h200-pcie-host.json"


def test_verdict_rows_are_the_predictors_answers_under_the_hold_rule():
    rec = json.loads(RECORD.read_text())
    assert rec["verdict_key"] == "fa4_law_hold"
    check_verdict_rows(rec, "fa4_law_hold", rec["rows"][::3],
                       lambda r: {**r["kw"], "hold": "next_epilogue" if r["kind"] == "persistent" else "issue"})
    check_summary(rec, "fa4_law_hold", "all persistent", [r for r in rec["rows"] if r["kind"] == "persistent"])


def test_first_rule_columns_are_the_first_records():
    check_first_rule_columns(json.loads(RECORD.read_text()), json.loads(FIRST.read_text()))
