"""The split-kernel held-out record (fourth rule of ``benchmarks/predict_pers_fa4.py``): it reloads, covers every
persistent fused row of pers6a / pers6 / pers6b, its verdict rows are the predictor's answers under the rule with
fa-heldout-v2's FA4 law (nothing refitted), and for the earlier kernels the rule is the first rule."""

import json

from xstage.paths import data_dir
from xstage.records import load_records

from .pers_fa4_checks import check_summary, check_verdict_rows

RECORD = data_dir() / "predictions" / "fa4-persistent-split-heldout-h200-pcie-host.json"
RUNS = ("attention-fa4/pers6a", "attention-fa4/pers6", "attention-fa4/pers6b")


def _rec():
    return json.loads(RECORD.read_text())


def test_covers_every_persistent_fused_row_of_the_runs():
    rec = _rec()
    assert rec["runs"] == list(RUNS) and rec["verdict_key"] == "fa4_law_split"
    want = set()
    for run in RUNS:
        frame, _ = load_records(data_dir() / run / "attention-fa4-kernel.parquet", "kernel")
        want |= {(run, int(M), v) for M, v in zip(frame["M"], frame["variant"]) if str(v).startswith("fused_vmm_pers")}
    got = {(r["set"], r["M"], r["variant"]) for r in rec["rows"]}
    assert got == want and len(rec["rows"]) == len(want) == 34
    assert {r["kernel"] for r in rec["rows"]} == {"staggerll", "staggerll1", "staggersplit", "staggersplitw"}


def test_laws_are_the_recorded_fit():
    rec = _rec()
    v2 = json.loads((data_dir() / rec["laws_from"]).read_text())
    assert rec["laws"] == {fam: v2["laws"][fam] for fam in ("fa4", "triton")}


def test_rule_maps_names_to_the_kernels_structure():
    for r in _rec()["rows"]:
        k, kw = r["kernel"], r["kw_split"]
        split, span1 = "split" in k, k.endswith("1") or "splitw" in k
        assert (kw["send"], kw["send_step_offset"]) == ("stagger", 1) and kw["order"] == "local_last"
        assert (kw.get("tail_parts", 1), kw.get("fa_tail_parts", 1)) == ((2, 2) if split else (1, 1))
        assert kw.get("due_over", "tile") == ("window" if "splitw" in k else "unit" if split else "tile")
        assert kw.get("stagger_span", 2) == (1 if span1 else 2)
        if k == "staggerll":   # an earlier kernel: the first rule's structure and answer, a new held-out row for it
            assert kw == r["kw"] and r["fa4_law_split_E_res_us"] == r["fa4_law_E_res_us"]


def test_verdict_rows_are_the_predictors_answers():
    rec = _rec()
    check_verdict_rows(rec, "fa4_law_split", rec["rows"][::3], lambda r: r["kw_split"])


def test_summary_counts_the_rows():
    rec = _rec()
    for name, sel in (("all persistent", lambda r: True), ("kernel staggersplitw", lambda r: r["kernel"] == "staggersplitw"),
                      ("M 16384", lambda r: r["M"] == 16384)):
        check_summary(rec, "fa4_law_split", name, [r for r in rec["rows"] if sel(r)])
