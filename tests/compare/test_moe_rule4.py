"""The fourth MoE rule (compare/moe_rule4.py) and its keys with the third held-out sweep (compare/moe_heldout3.py)."""

import json
import math

import pandas as pd
import pytest

from xstage.compare import moe_heldout3 as H3
from xstage.compare import moe_records as R
from xstage.compare import moe_rule3 as M3
from xstage.compare import moe_rule4 as M4
from xstage.errors import InputError
from xstage.sim.platform import load_platform
from xstage.sim.workloads.moe_layout import MoeProblem

from tests.compare.test_moe_heldout2 import SIM, _save, _times
from tests.compare.test_moe_records import _kernel_rows
from tests.compare.test_moe_rule3 import _kernel

P = load_platform("h200-pcie-host")


def test_rule_rejects_bad_numbers():
    with pytest.raises(InputError, match="cover_frac"):
        M4.Rule4(0.6, 0.1, 1.5)
    with pytest.raises(InputError, match="cover_frac"):
        M4.Rule4(0.6, 0.1, math.nan)
    with pytest.raises(InputError, match="r_sm_GBps"):
        M4.Rule4(0.0, 0.1, 0.5)


def test_no_cover_is_rule3():
    k = _kernel()
    a = M4.resimulate_rule4(k, P, M4.Rule4(0.3, 0.01, 0.0))
    b = M3.resimulate_rule3(k, P, M3.Rule3(0.3, 0.01))
    for tag in ("wave", "int"):
        assert a[f"sim_rule4_{tag}(us)"].iloc[0] == pytest.approx(b[f"sim_rule3_{tag}(us)"].iloc[0])


def test_cover_lets_linear1_mainloops_overlap_the_previous_store():
    k = _kernel()
    none, half, full = (M4.resimulate_rule4(k, P, M4.Rule4(0.3, 0.01, f)) for f in (0.0, 0.5, 1.0))
    # the interleaved order puts L1 tiles after remote L2 stores: more cover, a shorter makespan
    assert full["sim_rule4_int(us)"].iloc[0] < half["sim_rule4_int(us)"].iloc[0] < none["sim_rule4_int(us)"].iloc[0]
    s = M4.rule4_speedups(k, P, M4.Rule4(0.3, 0.01, 1.0))
    assert s.iloc[0] == pytest.approx(full["sim_rule4_wave(us)"].iloc[0] / full["sim_rule4_int(us)"].iloc[0])


def test_load_rule4_reads_its_record_and_names_a_bad_one(tmp_path):
    assert M4.load_rule4(tmp_path) is None
    (tmp_path / "predictions").mkdir()
    path = tmp_path / "predictions" / M4.RULE4_RECORD
    path.write_text(json.dumps({"platform": "", "fitted": {"r_sm_GBps": 0.4, "Q_eff_MiB": 0.1, "cover_frac": 0.75}}))
    rule = M4.load_rule4(tmp_path)
    assert (rule.r_sm_GBps, rule.q_eff_MiB, rule.cover_frac) == (0.4, 0.1, 0.75)
    assert rule.source == "predictions/moe-rule4-fit.json"
    path.write_text("{")
    with pytest.raises(InputError, match="rule-4 record"):
        M4.load_rule4(tmp_path)


def test_heldout3_rows_get_their_own_keys_and_leave_the_earlier_ones(tmp_path):
    _save(tmp_path / "moe" / "a" / "moe-kernel.parquet", _kernel_rows(_times(120.0, 100.0), sim=SIM), None)
    before = R.summarize(tmp_path)
    assert not any(k.startswith("heldout3_") or "rule4" in k for k in before)
    fresh = _kernel_rows(_times(90.0, 100.0), problem=MoeProblem(256, 128, 700, seed=3), sim=SIM)
    _save(tmp_path / "moe" / "b" / "moe-kernel.parquet", fresh, "heldout3")
    (tmp_path / "predictions").mkdir()
    (tmp_path / "predictions" / M4.RULE4_RECORD).write_text(json.dumps(
        {"platform": "", "fitted": {"r_sm_GBps": 0.4, "Q_eff_MiB": 0.1, "cover_frac": 0.75}}))
    after = R.summarize(tmp_path)
    for key, value in before.items():
        assert after[key] == value or (isinstance(value, float) and math.isnan(value) and math.isnan(after[key]))
    assert after["heldout3_n_configs"] == 1 and after["heldout3_geomean_speedup_interleaved"] == pytest.approx(0.9)
    assert after["heldout3_names_winner_one_stage"] == 0   # measured 0.9, replayed 1.1
    assert after["rule4_record"] == "predictions/moe-rule4-fit.json" and after["rule4_cover_frac"] == 0.75
    want = M4.rule4_speedups(pd.DataFrame(fresh), P, M4.load_rule4(tmp_path))
    assert after["heldout3_median_speedup_error_pp_rule4"] == pytest.approx(abs(want.iloc[0] - 0.9) * 100)
    assert after["rule4_main_bf16_n_configs"] == 1


def test_split_heldout3_without_a_sweep_column_keeps_every_row():
    k = pd.DataFrame({"config": ["a", "b"]})
    earlier, fresh = H3.split_heldout3(k)
    assert len(earlier) == 2 and fresh.empty
    earlier, fresh = H3.split_heldout3(k.assign(sweep=["heldout2", "heldout3"]))
    assert earlier["config"].tolist() == ["a"] and fresh["config"].tolist() == ["b"]
