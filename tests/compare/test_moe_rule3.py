"""The third MoE rule (compare/moe_rule3.py) and the a-priori replay inputs (compare/moe_apriori.py)."""

import json
import math

import pandas as pd
import pytest

from xstage.compare import moe_apriori as A
from xstage.compare import moe_rule3 as M
from xstage.compare import moe_two_stage as L
from xstage.errors import InputError
from xstage.records import moe as RB
from xstage.sim.platform import load_platform
from xstage.sim.workloads.moe_layout import MoeProblem

PROBLEM = MoeProblem(256, 128, 600, routing="skewed", seed=2)


def _kernel(copy_GBps: float = 20.0, problem=PROBLEM) -> pd.DataFrame:
    base = {"lead_rows": 2, "num_sms": 8, "baseline": "torch._grouped_mm", "measured_l1(us)": 6.0,
            "measured_l2(us)": 3.0, "measured_l1_epilogue(us)": 0.5, "measured_l2_epilogue(us)": 1.0,
            "combine_copy(GBps)": copy_GBps}
    return pd.DataFrame([RB.kernel_row(problem, v, [t, t * 1.01, t * 0.99], **base)
                         for v, t in {"expert_wave": 100.0, "interleaved": 90.0}.items()])


def test_rule_rejects_bad_numbers_and_allows_no_pool():
    with pytest.raises(InputError, match="r_sm_GBps"):
        M.Rule3(0.0, 0.1)
    with pytest.raises(InputError, match="q_eff_MiB"):
        M.Rule3(0.6, math.nan)
    with pytest.raises(InputError, match="pool_GBps"):
        M.Rule3(0.6, 0.1, pool_GBps=-1.0)
    assert M.Rule3(0.6, 0.1).pool_GBps is None


def test_the_rule_drains_at_the_platform_rate_not_the_copy_rate():
    p = load_platform("h200-pcie-host")
    rule = M.Rule3(5.0, 0.01)   # 8 SMs x 5 GB/s: the drain binds below 40 GB/s
    slow, fast = M.resimulate_rule3(_kernel(0.5), p, rule), M.resimulate_rule3(_kernel(200.0), p, rule)
    assert slow["sim_rule3_int(us)"].iloc[0] == pytest.approx(fast["sim_rule3_int(us)"].iloc[0])
    # the two-stage law drains at the copy rate: there the two differ
    law = L.TwoStageLaw(5.0, 0.01)
    a, b = L.resimulate_law(_kernel(0.5), p, law), L.resimulate_law(_kernel(200.0), p, law)
    assert a["sim_two_stage_int(us)"].iloc[0] > b["sim_two_stage_int(us)"].iloc[0]


def test_a_slower_per_sm_rate_never_shortens_the_makespan():
    p = load_platform("h200-pcie-host")
    k = _kernel()
    slow = M.resimulate_rule3(k, p, M.Rule3(0.01, 0.01))
    quick = M.resimulate_rule3(k, p, M.Rule3(10.0, 0.01))
    for col in ("sim_rule3_wave(us)", "sim_rule3_int(us)"):
        assert slow[col].iloc[0] > quick[col].iloc[0]
    s = M.rule3_speedups(k, p, M.Rule3(0.01, 0.01))
    assert s.index.tolist() == [k["config"].iloc[0]]
    assert s.iloc[0] == pytest.approx(slow["sim_rule3_wave(us)"].iloc[0] / slow["sim_rule3_int(us)"].iloc[0])


def test_load_rule3_reads_the_committed_fit_and_names_a_broken_record(tmp_path):
    from xstage.paths import data_dir

    rule = M.load_rule3(data_dir())
    assert rule is not None and rule.pool_GBps is None and rule.source == "predictions/moe-rule3-fit.json"
    assert 0.5 <= rule.r_sm_GBps <= 0.75
    assert M.load_rule3(tmp_path) is None
    (tmp_path / "predictions").mkdir()
    (tmp_path / "predictions" / M.RULE3_RECORD).write_text(json.dumps({"fitted": {"r_sm_GBps": 0.6}}))
    with pytest.raises(InputError, match="rule-3 record"):
        M.load_rule3(tmp_path)


def test_tile_model_is_linear_in_k_per_class_and_rows_follow_the_bench():
    rows = []
    for pps, h, i in ((1, 2048, 2048), (1, 4096, 3072), (1, 7168, 4096), (2, 1536, 512), (2, 4096, 1024)):
        rows.append({"variant": "interleaved", "config": f"c{h}-{i}", "programs_per_sm": pps, "hidden": h,
                     "intermediate": i, "combine_copy(GBps)": 52.0, "group_rows": 8 * pps, "block_n": 512 // (2 * pps),
                     "measured_l1(us)": 1.0 + 0.01 * h, "measured_l2(us)": 2.0 + 0.02 * i,
                     "measured_l1_epilogue(us)": 2.0, "measured_l2_epilogue(us)": 3.0 * pps})
    model = A.fit_tile_model(pd.DataFrame(rows), 132)
    assert model.classes[1].l1 == pytest.approx((1.0, 0.01)) and model.classes[2].l2 == pytest.approx((2.0, 0.02))
    problem, row, leads = A.apriori_row(model, 3072, 2560, 4096, 8, "balanced", 1536, balance_short=True)
    assert row["programs_per_sm"] == 1 and row["num_sms"] == 132 and row["balance"] is False
    assert row["measured_l2(us)"] == pytest.approx(2.0 + 0.02 * 2560) and problem.block_n == 256
    assert leads == A.candidate_leads(problem, 132) and len(leads) >= 1
    problem, row, _ = A.apriori_row(model, 3072, 1024, 4096, 8, "skewed", 1536, balance_short=True)
    assert row["programs_per_sm"] == 2 and row["num_sms"] == 264 and row["balance"] is True
    with pytest.raises(InputError, match="fit records"):
        A.fit_tile_model(pd.DataFrame(rows).drop(columns="combine_copy(GBps)"), 132)
