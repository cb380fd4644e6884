"""The seventh FA rule's records (``benchmarks/predict_fa_rule7.py``): d7 is the grid's best on the committed rows,
the pre-registration names the rule's commit, and every recorded answer is the code's."""

import json

import pytest

from xstage.cli.exits import call
from xstage.paths import data_dir
from xstage.records import load_records
from xstage.sim.platform import load_platform

from .bench_scripts import load_script

RECORDS = {name: f"predictions/fa-rule7-{name}-h200-pcie-host.json" for name in ("fit", "preregistered", "pers10",
                                                                                    "pers11")}


@pytest.fixture(scope="module")
def mod():
    return load_script("predict_fa_rule7")


@pytest.fixture(scope="module")
def recs():
    return {k: json.loads((data_dir() / v).read_text()) for k, v in RECORDS.items()
            if (data_dir() / v).is_file()}


def test_d7_is_the_grids_best_and_the_grid_is_the_codes(mod, recs):
    fit = recs["fit"]["seventh_rule"]
    grid = {float(d): (v["within"], v["median_abs_error_us"]) for d, v in fit["grid"].items()}
    assert set(grid) == set(mod.D7_GRID) and fit["rows"] == len(recs["fit"]["rows"]) >= 130
    assert fit["d7"] == min(grid, key=lambda d: (-grid[d][0], grid[d][1]))
    assert 0 < fit["d7"] < recs["fit"]["sixth_rule"]["tile_end_drift"]   # weaker than the tile log's fused drift
    platform, m = load_platform(recs["fit"]["platform"]), recs["fit"]["sixth_rule"]
    rows = mod.fit_rows(data_dir())
    assert len(rows) == fit["rows"]
    for d in (fit["d7"], 0.0):                 # two grid points recomputed from the runs
        pred = [mod.rule7_us(r, platform, m, d) for r in rows]
        assert sum(mod.PP.within(p, r["measured_E_res_us"]) for p, r in zip(pred, rows)) == grid[d][0]


@pytest.mark.parametrize("name", ["fit", "preregistered", "pers10", "pers11"])
def test_recorded_answers_are_the_codes(mod, recs, name):
    rec = recs[name]
    platform, d7 = load_platform(rec["platform"]), rec["seventh_rule"]["d7"]
    for r in rec["rows"][::7]:
        again = {k: v for k, v in r.items() if not k.startswith(("rule5_", "rule6_", "rule7_"))}
        mod.predict(again, platform, rec["fa4_law"], rec["sixth_rule"], d7)
        for k in mod.KEYS:
            assert again[f"{k}_E_res_us"] == pytest.approx(r[f"{k}_E_res_us"], abs=1e-6)
            if "measured_E_res_us" in r:
                assert again[f"{k}_within"] == r[f"{k}_within"] == mod.PP.within(r[f"{k}_E_res_us"],
                                                                                  r["measured_E_res_us"])


def test_preregistered_rows_are_new_M_and_name_the_rules_commit(recs):
    pre = recs["preregistered"]
    assert pre["mode"] == "preregistered" and pre["rules_commit"] == pre["provenance"]["git_commit"]
    assert pre["seventh_rule"]["d7"] == recs["fit"]["seventh_rule"]["d7"]
    fitted = {r["M"] for r in recs["fit"]["rows"]}
    Ms = {r["M"] for r in pre["rows"]}
    assert Ms and not Ms & fitted and all("measured_E_res_us" not in r for r in pre["rows"])
    for r in pre["rows"]:      # no VMM range where the output is not a multiple of 2 MiB: stock rows only there
        vmm = (r["M"] * 3 * 128 * 2) % (2 << 20) == 0
        assert r["kind"] == "stock" or vmm
        assert (r["variant"] == "fused_vmm") <= vmm


def test_pers10_was_predicted_before_it_was_measured(recs):
    pre, judged = recs["preregistered"], recs["pers10"]
    _, meta = load_records(data_dir() / "attention-fa4/pers10/attention-fa4-kernel.parquet", "kernel")
    assert pre["provenance"]["date"] < meta["provenance"]["date"]
    assert meta["provenance"]["git_commit"] != pre["rules_commit"]     # the run names the record's commit, after it
    assert judged["mode"] == "judged" and judged["seventh_rule"]["d7"] == pre["seventh_rule"]["d7"]
    before = {(r["M"], r["variant"]): r for r in pre["rows"]}
    assert len(judged["rows"]) == len(before) == 20
    for r in judged["rows"]:     # the measured FA-only time moved the seventh rule's answers by < 12 us, any by < 20
        p = before[(r["M"], r["variant"])]
        for k, most in (("rule7", 12.0), ("rule6_congestion", 20.0), ("rule5", 20.0)):
            assert abs(p[f"{k}_E_res_us"] - r[f"{k}_E_res_us"]) < most
    s = judged["summary"]["all"]
    assert (s["rule7"]["n"], s["rule7"]["within"]) == (20, sum(r["rule7_within"] for r in judged["rows"]))



def test_pers11_is_out_of_sample_rows_at_the_fits_M_judged_by_the_frozen_rule(mod, recs):
    """pers11 (session 21's default sweep) came after the rule and its fit and is not in the fit, but repeats the
    fit's M and configuration: new rows, not new M. Every one of its 20 answers is the code's at the frozen d7."""
    fit, judged = recs["fit"], recs["pers11"]
    _, meta = load_records(data_dir() / "attention-fa4/pers11/attention-fa4-kernel.parquet", "kernel")
    assert fit["provenance"]["date"] < meta["provenance"]["date"]
    assert "attention-fa4/pers11" not in mod.FIT_RUNS and judged["mode"] == "judged"
    assert judged["seventh_rule"]["d7"] == fit["seventh_rule"]["d7"]
    assert judged["seventh_rule"]["runs"] == fit["seventh_rule"]["runs"]
    assert {r["M"] for r in judged["rows"]} == {8192, 16384, 32768, 65536} <= {r["M"] for r in fit["rows"]}
    rows = mod.run_rows(data_dir(), "attention-fa4/pers11")
    assert [(r["M"], r["variant"]) for r in rows] == [(r["M"], r["variant"]) for r in judged["rows"]]
    platform, d7 = load_platform(judged["platform"]), judged["seventh_rule"]["d7"]
    for r, rec in zip(rows, judged["rows"]):
        mod.predict(r, platform, judged["fa4_law"], judged["sixth_rule"], d7)
        assert r["measured_E_res_us"] == rec["measured_E_res_us"]
        assert r["rule7_E_res_us"] == pytest.approx(rec["rule7_E_res_us"], abs=1e-6)
    s = judged["summary"]["all"]["rule7"]
    assert (s["n"], s["within"]) == (20, sum(r["rule7_within"] for r in rows))
    assert [(r["M"], r["variant"]) for r in rows if not r["rule7_within"]] == [(32768, "fused_vmm_pers")]


def test_bad_input_is_one_line_and_nothing_written(mod, tmp_path):
    out = tmp_path / "x.json"
    out.write_text("{}")
    assert call(lambda: mod.main(["--fit", "--out", str(out)])) == 2
    assert out.read_text() == "{}"
    assert call(lambda: mod.main(["--preregister", "40k"])) == 2
    assert call(lambda: mod.main(["--runs", "attention-fa4/nope"])) == 2


def test_every_earlier_rule_on_pers10_and_the_fifth_agrees(recs):
    """``predict_pers_fa4.py --runs attention-fa4/pers10`` (every earlier rule's column) gives the fifth rule's answers
    that the seventh rule's record carries beside its own, row for row."""
    allr = json.loads((data_dir() / "predictions/fa4-persistent-all-rules-pers10-h200-pcie-host.json").read_text())
    assert allr["runs"] == ["attention-fa4/pers10"] and allr["verdict_key"] == "fa4_law_drift_measured"
    mine = {(r["M"], r["variant"]): r for r in recs["pers10"]["rows"]}
    assert len(allr["rows"]) == 10      # the 8 persistent rows and stock fused_vmm at 40K, 56K
    for r in allr["rows"]:
        assert r["fa4_law_drift_measured_E_res_us"] == pytest.approx(mine[(r["M"], r["variant"])]["rule5_E_res_us"],
                                                                     abs=1e-6)
