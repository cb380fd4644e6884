"""The lockstep-overlap record (session 7, ``benchmarks/finite_runs_lockstep.py``): the rule's periods beside the
isolated-mode ones, on the wide grids' halves and on the fresh grid, as the docs quote them."""

import json

from xstage.paths import data_dir

RECORD = data_dir() / "calibration-extra" / "finite-runs-lockstep-s7.json"


def test_the_overlap_rule_fixes_the_host_period_and_keeps_the_issue_time():
    rec = json.loads(RECORD.read_text())
    wide, fresh = rec["host two-stage-gated"], rec["host two-stage-gated on fresh"]
    assert wide["as_run"]["period"]["p90_rel_err"] > 0.3                       # isolated mode: barrier after the drain
    for r in (wide, fresh):
        over = r["lockstep_overlap"]
        assert over["all"]["period"]["within_10pct"] == 1.0
        assert over["all"]["T_iss"] == r["as_run"]["T_iss"]                    # the same issue times
        assert over["heldout"]["period"]["n"] + over["fit"]["period"]["n"] == over["all"]["period"]["n"]
    assert fresh["lockstep_overlap"]["all"]["period"]["n"] == 49
