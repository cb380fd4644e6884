"""The two-stage MoE law in the replay and its results keys (compare/moe_two_stage.py)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from xstage.compare import moe_records as R
from xstage.compare import moe_two_stage as L
from xstage.errors import InputError
from xstage.records import moe as RB
from xstage.records import save_records
from xstage.sim.platform import load_platform
from xstage.sim.workloads.moe_layout import MoeProblem

PROBLEM = MoeProblem(256, 128, 600, routing="skewed", seed=2)


def _rows(times: dict, problem=PROBLEM, **extra):
    base = {"lead_rows": 2, "num_sms": 8, "baseline": "torch._grouped_mm", "measured_l1(us)": 6.0,
            "measured_l2(us)": 3.0, "measured_l1_epilogue(us)": 0.5, "measured_l2_epilogue(us)": 1.0,
            "combine_copy(GBps)": 20.0, **extra}
    return [RB.kernel_row(problem, v, [t, t * 1.01, t * 0.99], **base) for v, t in times.items()]


def test_law_rejects_bad_numbers():
    with pytest.raises(InputError, match="r_sm_GBps"):
        L.TwoStageLaw(0.0, 0.1)
    with pytest.raises(InputError, match="q_eff_MiB"):
        L.TwoStageLaw(0.5, math.nan)
    with pytest.raises(InputError, match="cover_us"):
        L.TwoStageLaw(0.5, 0.1, cover_us=-1.0)


def test_law_platform_shares_the_sm_rate_between_its_programs():
    p = load_platform("h200-pcie-host")
    law = L.TwoStageLaw(0.6, 0.05)
    two = L.law_platform(p, law, 51.0, programs_per_sm=2)
    assert two.producer_issue_GBps == pytest.approx(0.3) and two.t_fixed_us == 0.0
    assert two.drain_rate_GBps == 51.0 and two.capacity_bytes(132) == pytest.approx(0.05 * 2**20)
    one = L.law_platform(p, L.TwoStageLaw(0.6, 0.05, per_sm=False), None, programs_per_sm=2)
    assert one.producer_issue_GBps == pytest.approx(0.6) and one.drain_rate_GBps == p.drain_rate_GBps


def test_speedup_errors_count_winners_only_where_orders_differ():
    e = L.speedup_errors([1.05, 0.98, 1.00, 1.10], [1.02, 1.01, 1.00, 1.30], [False, False, True, False])
    assert e["n"] == 4 and e["n_distinct"] == 3 and e["n_names_winner"] == 2
    assert e["median_pp"] == pytest.approx(np.median([3, 3, 0, 20]))
    assert e["names_winner"] == pytest.approx(2 / 3)


def test_naming_beyond_the_timing_spread_leaves_out_ties_and_unknown_spreads():
    measured, replayed = [1.05, 0.98, 1.00, 1.10, 0.99], [1.02, 1.01, 1.00, 0.95, 1.01]
    e = L.speedup_errors(measured, replayed, [False, False, True, False, False], [0.01, 0.03, 0.0, 0.02, math.nan])
    # beyond: 1.05 (margin 0.05 > 0.01, named) and 1.10 (0.10 > 0.02, missed); 0.98 is within its 0.03, the
    # identical order has no winner, the unknown spread is left out
    assert e["n_distinct"] == 4 and e["n_names_winner"] == 1
    assert e["n_beyond_spread"] == 2 and e["n_names_winner_beyond_spread"] == 1
    assert e["names_winner_beyond_spread"] == pytest.approx(0.5)
    assert "n_beyond_spread" not in L.speedup_errors(measured, replayed, [False] * 5)


def test_timing_spread_is_the_wider_schedule_iqr_over_its_median():
    k = pd.DataFrame({"config": ["a", "a", "a", "b", "b"],
                      "variant": ["expert_wave", "interleaved", "grouped_mm", "expert_wave", "interleaved"],
                      "time(us)": [100.0, 50.0, 10.0, 10.0, 10.0], "time_p25(us)": [99.0, 49.0, 0.0, 9.9, 9.8],
                      "time_p75(us)": [101.0, 52.0, 20.0, 10.1, 10.0]})
    s = L.timing_spread(k)
    assert s["a"] == pytest.approx(0.06) and s["b"] == pytest.approx(0.02)   # grouped_mm's 2.0 not counted
    assert L.timing_spread(k.drop(columns=["time_p25(us)"])).isna().all()


def test_slower_store_rate_stretches_the_replay():
    k = pd.DataFrame(_rows({"expert_wave": 120.0, "interleaved": 100.0}))
    p = load_platform("h200-pcie-host")
    fast = L.resimulate_law(k, p, L.TwoStageLaw(50.0, 1.0))
    slow = L.resimulate_law(k, p, L.TwoStageLaw(0.05, 0.05))
    assert (slow["sim_two_stage_wave(us)"] > fast["sim_two_stage_wave(us)"] * 2).all()
    fixed = L.resimulate_law(k, p, L.TwoStageLaw(50.0, 1.0, epilogue_fixed=True))
    assert (fixed["sim_two_stage_int(us)"] > fast["sim_two_stage_int(us)"]).all()  # + 1 us per L2 tile
    covered = L.resimulate_law(k, p, L.TwoStageLaw(0.05, 0.05, cover_us=5.0))
    assert (covered["sim_two_stage_wave(us)"] < slow["sim_two_stage_wave(us)"]).all()  # mainloops overlap the stores


def _law_record(folder, adopted: bool, r_sm=0.5):
    folder.mkdir(parents=True, exist_ok=True)
    rec = {"adopted": adopted, "fitted": {"r_sm_GBps": r_sm, "Q_eff_MiB": 0.2, "per_sm": False,
                                          "epilogue_fixed": True}}
    (folder / "moe-law-heldout-test.json").write_text(json.dumps(rec))


def test_adopted_law_and_its_provenance(tmp_path):
    assert L.adopted_law(tmp_path) is None
    _law_record(tmp_path / "predictions", adopted=False)
    assert L.adopted_law(tmp_path) is None
    _law_record(tmp_path / "predictions", adopted=True)
    law = L.adopted_law(tmp_path)
    assert (law.r_sm_GBps, law.q_eff_MiB, law.per_sm, law.epilogue_fixed) == (0.5, 0.2, False, True)
    assert law.source == "predictions/moe-law-heldout-test.json"
    (tmp_path / "predictions" / "moe-law-heldout-test.json").write_text("{not json")
    with pytest.raises(InputError, match="law record"):
        L.adopted_law(tmp_path)


def test_results_keys_beside_todays(tmp_path):
    rows = _rows({"expert_wave": 120.0, "interleaved": 100.0}, platform="h200-pcie-host")
    save_records(tmp_path / "moe" / "moe-kernel.parquet", "kernel", pd.DataFrame(rows), {"config": {}, "provenance": {}})
    before = R.summarize(tmp_path)
    assert "sim_two_stage_names_winner" not in before
    assert before["median_speedup_error_pp"] == pytest.approx(abs(before_sim(tmp_path) - 1.2) * 100)
    _law_record(tmp_path / "predictions", adopted=True)
    after = R.summarize(tmp_path)
    for key, value in before.items():  # today's keys unchanged
        assert after[key] == value or (isinstance(value, float) and math.isnan(value) and math.isnan(after[key]))
    assert after["two_stage_law_record"] == "predictions/moe-law-heldout-test.json"
    assert after["n_distinct_two_stage"] == 1 and after["sim_two_stage_names_winner"] in (0, 1)
    assert math.isfinite(after["median_speedup_error_pp_two_stage"])
    rec = json.loads((tmp_path / "predictions" / "moe-law-heldout-test.json").read_text())
    (tmp_path / "predictions" / "moe-law-heldout-test.json").write_text(json.dumps({**rec, "platform": "h200-nvlink"}))
    other = R.summarize(tmp_path)  # a law fitted on another platform's records replays none of these
    assert "sim_two_stage_names_winner" not in other and other["n_sim_names_winner"] == before["n_sim_names_winner"]


def before_sim(tmp_path) -> float:
    k = R.load_kernel_records(tmp_path / "moe")
    k = R.resimulate(k, load_platform("h200-pcie-host"), "x")
    r = k[k["variant"] == "interleaved"].iloc[0]
    return float(r["sim_wave(us)"] / r["sim_int(us)"])
