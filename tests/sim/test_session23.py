"""Session 23's H200 lease and its H100 MoE call (docs/calibration/fresh16-repeat.md, moe-rules.md, fa4-h100.md): the
records carry the GPU and commit, and every committed verdict follows from its rows by the pre-registered rule; the cross-call
instrument figure is recomputed from the two folders."""

import functools
import json

import pytest

from xstage.paths import data_dir
from xstage.records import load_records

from .bench_scripts import load_script

EXTRA = data_dir() / "calibration-extra"
PRED = data_dir() / "predictions"
UUID = "GPU-c6f60d55"


@functools.cache
def rec(path) -> dict:
    return json.loads(path.read_text())


def test_the_fresh16_repeat_was_measured_on_another_h200_and_committed_before_its_scores():
    _, meta = load_records(EXTRA / "h200-pcie-host-fresh16-r2/points-runs.parquet", "point")
    prov = meta["provenance"]
    assert prov["git_commit"].startswith("71203d0") and prov["gpu"]["gpu_uuid"].startswith(UUID)
    _, first = load_records(EXTRA / "h200-pcie-host-fresh16/points-runs.parquet", "point")
    assert not first["provenance"]["gpu"]["gpu_uuid"].startswith(UUID)   # two cards
    assert not (EXTRA / "h200-pcie-host-fresh16-r2/bursts.parquet").exists()


def test_combo18s_verdict_follows_from_its_seed_rows():
    r = rec(EXTRA / "fresh16-r2-scores.json")
    assert r["pre_registered"] and r["decision"]["rule"].endswith("fresh16-repeat-preregistration.md")
    combo = [x for x in r["rows"] if x["candidate"] == "combo18"]
    assert [x["seed"] for x in combo] == [0, 1, 2, 3, 4]
    for x in combo:
        four = (x["heldout_median_rel_err_T_iss"] <= 0.05 and x["heldout_p90_rel_err_T_iss"] <= 0.15
                and x["heldout_median_rel_err_period"] <= 0.05 and x["heldout_p90_rel_err_period"] <= 0.15)
        assert x["all_four"] is four
    met = sum(x["all_four"] for x in combo)
    assert met == r["decision"]["seeds_met"] == 3 and r["decision"]["verdict"] == "not met"   # the rule: >= 4 of 5


def test_the_cross_call_instrument_is_recomputed_and_beyond_by_knee18s_rule():
    got = load_script("calib_repeat21").score(EXTRA / "h200-pcie-host-fresh16", EXTRA / "h200-pcie-host-fresh16-r2",
                                              log=lambda *a: None)
    want = rec(EXTRA / "fresh16-repeat-scores.json")
    assert [x["p90_T_iss"] for x in got["across_calls"]] == pytest.approx([x["p90_T_iss"] for x in want["across_calls"]])
    # beyond the instrument iff the T_iss p90 > 0.15 at >= 2 of 5 seeds: here at all five
    assert sum(x["p90_T_iss"] > 0.15 for x in got["across_calls"]) == 5
    assert got["verdict"] == want["verdict"] == "beyond the instrument"
    assert {k: v["verdict"] for k, v in got["beside"]["within_each_call"].items()} == \
        {"call1": "within the instrument", "call2": "within the instrument"}


def test_the_moe_repeat_keeps_its_own_folder_and_rule3_meets_both_targets_there():
    kernel, meta = load_records(data_dir() / "moe-repeat/run-71203d0-heldout2/moe-kernel.parquet", "kernel")
    assert meta["provenance"]["gpu"]["gpu_uuid"].startswith(UUID) and kernel["config"].nunique() == 16
    r = rec(PRED / "moe-rule3-71203d0-heldout2-h200-repeat.json")
    s = r["summary"]["rule3"]
    rows = [x for x in r["rows"] if not x["identical"]]
    pp = sorted(abs(x["rule3"] - x["measured"]) * 100 for x in r["rows"])
    assert s["median_pp"] == pytest.approx((pp[7] + pp[8]) / 2) and s["median_pp"] <= 3
    assert s["n_names_winner"] == s["n_distinct"] == len(rows) == 16
    # data/moe/ still holds only the session-7 heldout2 rows: the repeat does not replace them in `xstage results moe`
    from xstage.compare.moe_records import load_kernel_records
    main = load_kernel_records(data_dir() / "moe")
    assert (main.loc[main["sweep"] == "heldout2", "config"].nunique()) == 16
    assert not any("moe-repeat" in str(p) for p in (data_dir() / "moe").rglob("*"))


def test_pers12_meets_the_seventh_rule_on_the_h200():
    r = rec(PRED / "fa-rule7-pers12-h200-pcie-host.json")
    assert r["platform"] == "h200-pcie-host" and r["seventh_rule"]["d7"] == 0.006
    rows = r["rows"]
    assert len(rows) == 20 and all(x["set"] == "attention-fa4/pers12" for x in rows)
    for x in rows:
        assert x["rule7_within"] is (abs(x["rule7_E_res_us"] - x["measured_E_res_us"])
                                      <= max(20.0, 0.2 * abs(x["measured_E_res_us"])))
    assert sum(x["rule7_within"] for x in rows) == r["summary"]["all"]["rule7"]["within"] == 20
    _, meta = load_records(data_dir() / "attention-fa4/pers12/attention-fa4-kernel.parquet", "kernel")
    assert meta["provenance"]["gpu"]["gpu_uuid"].startswith(UUID)


def test_the_h100_moe_run_sits_beside_the_h200_rows_and_rule3_meets_both_targets_on_it():
    run = data_dir() / "moe/run-973b30f-h100-heldout2"
    kernel, meta = load_records(run / "moe-kernel.parquet", "kernel")
    assert meta["provenance"]["gpu"]["gpu_uuid"].startswith("GPU-a2ef85a6") and "H100" in meta["provenance"]["gpu"]["gpu"]
    assert set(kernel["platform"]) == {"h100-pcie-host"} and kernel["config"].nunique() == 16
    r = rec(PRED / "moe-rule3-973b30f-h100-heldout2.json")
    assert r["platform"] == "h100-pcie-host"
    pp = sorted(abs(x["rule3"] - x["measured"]) * 100 for x in r["rows"])
    s = r["summary"]["rule3"]
    assert s["median_pp"] == pytest.approx((pp[7] + pp[8]) / 2) and s["median_pp"] <= 3
    assert s["n_names_winner"] == s["n_distinct"] == 16
    # the default summary is still the H200's heldout2; --platform picks the H100's
    from xstage.compare.moe_records import load_kernel_records, one_platform
    both = load_kernel_records(data_dir() / "moe")
    assert set(one_platform(both)["platform"]) == {"h200-pcie-host"}
    h200 = both[(both["platform"] == "h200-pcie-host") & (both["sweep"] == "heldout2")]
    assert h200["config"].nunique() == 16 and (both["platform"] == "h100-pcie-host").sum() == len(kernel)
