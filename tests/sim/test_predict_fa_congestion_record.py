"""The fifth and sixth FA rules' records (``benchmarks/predict_fa_congestion.py``): the sixth rule's numbers are the
pers7 tile log's, the pre-registration came before the pers9 run, and every recorded answer is the code's."""

import json

import pytest

from xstage.cli.exits import call
from xstage.paths import data_dir
from xstage.records import load_records
from xstage.sim.platform import load_platform

from .bench_scripts import load_script

RECORDS = {name: f"predictions/fa-rules56-{name}-h200-pcie-host.json" for name in ("existing", "preregistered", "pers9")}


@pytest.fixture(scope="module")
def mod():
    return load_script("predict_fa_congestion")


@pytest.fixture(scope="module")
def recs():
    return {k: json.loads((data_dir() / v).read_text()) for k, v in RECORDS.items()}


@pytest.fixture(scope="module")
def measured(mod):
    base = data_dir()
    return mod.measure(load_records(base / mod.TILES, "tile")[0], json.loads((base / mod.SUMMARY).read_text()))


def test_sixth_rule_numbers_are_the_tile_logs(measured, recs):
    assert measured["q_c_MB"] == pytest.approx(0.35) and 0.005 < measured["tile_end_drift"] < 0.02
    assert measured["s5"] == pytest.approx(0.0165, abs=5e-5)
    errs = measured["median_abs_err_us"]
    assert errs[str(measured["q_c_MB"])] == min(errs.values()) < errs["0.0"] / 2   # a threshold, not "link busy"
    for rec in recs.values():
        assert rec["sixth_rule"]["q_c_bytes"] == pytest.approx(measured["q_c_bytes"])
        assert rec["sixth_rule"]["tile_end_drift"] == pytest.approx(measured["tile_end_drift"], rel=1e-12)


def test_preregistered_before_the_run_and_the_same_answers(recs):
    pre, judged = recs["preregistered"], recs["pers9"]
    assert pre["mode"] == "preregistered" and pre["rules_commit"] == pre["provenance"]["git_commit"]
    _, meta = load_records(data_dir() / "attention-fa4/pers9/attention-fa4-kernel.parquet", "kernel")
    assert pre["provenance"]["date"] < meta["provenance"]["date"]
    before = {(r["M"], r["variant"]): r for r in pre["rows"]}
    assert len(judged["rows"]) == 16 and all("measured_E_res_us" in r for r in judged["rows"])
    for r in judged["rows"]:
        p = before[(r["M"], r["variant"])]    # every judged row was predicted before it was measured
        for k in ("rule5", "rule6_congestion"):   # the interpolated FA-only time moved no answer by more than 5 us
            assert abs(p[f"{k}_E_res_us"] - r[f"{k}_E_res_us"]) < 5.0


@pytest.mark.parametrize("name", ["pers9", "existing"])
def test_recorded_answers_are_the_codes(mod, recs, name):
    rec = recs[name]
    platform = load_platform(rec["platform"])
    rows = rec["rows"] if name == "pers9" else rec["rows"][::9]
    for r in rows:
        again = {k: v for k, v in r.items() if not k.startswith(("rule5_", "rule6_"))}
        mod.predict(again, platform, rec["fa4_law"], rec["sixth_rule"])
        for k in ("rule5_E_res_us", "rule6_congestion_E_res_us"):
            assert again[k] == pytest.approx(r[k], abs=1e-6)
            verdict = k.replace("_E_res_us", "_within")
            assert again[verdict] == r[verdict] == mod.PP.within(r[k], r["measured_E_res_us"])
    for group in rec["summary"].values():
        assert all(0 <= v["within"] <= v["n"] for v in group.values())
    assert rec["summary"]["all"]["rule6_congestion"]["n"] == len(rec["rows"])


def test_existing_output_is_refused(mod, tmp_path):
    out = tmp_path / "x.json"
    out.write_text("{}")
    assert call(lambda: mod.main(["--runs", "attention-fa4/pers9", "--out", str(out)])) == 2
    assert out.read_text() == "{}"
    assert call(lambda: mod.main(["--preregister", "12k"])) == 2


def test_every_earlier_rule_on_pers9_and_the_fifth_agrees(recs):
    """``predict_pers_fa4.py --runs attention-fa4/pers9`` (every earlier rule's column) gives the fifth rule's
    answers that ``predict_fa_congestion`` recorded, row for row."""
    allr = json.loads((data_dir() / "predictions/fa4-persistent-all-rules-pers9-h200-pcie-host.json").read_text())
    assert allr["runs"] == ["attention-fa4/pers9"] and allr["verdict_key"] == "fa4_law_drift_measured"
    mine = {(r["M"], r["variant"]): r for r in recs["pers9"]["rows"]}
    assert len(allr["rows"]) == 10      # the 8 persistent rows and stock fused_vmm at 24K, 48K
    for r in allr["rows"]:
        assert r["fa4_law_drift_measured_E_res_us"] == pytest.approx(mine[(r["M"], r["variant"])]["rule5_E_res_us"],
                                                                     abs=1e-6)
