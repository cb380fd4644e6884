"""The second held-out sweep's keys (``heldout2_*``) and the third rule's (compare/moe_heldout2.py)."""

import json
import math
import shutil

import pandas as pd
import pytest

from xstage.compare import moe_heldout2 as H
from xstage.compare import moe_records as R
from xstage.compare import moe_rule3 as M
from xstage.paths import data_dir
from xstage.records import save_records
from xstage.sim.workloads.moe_layout import MoeProblem

from tests.compare.test_moe_records import _kernel_rows

SIM = {"sim_wave(us)": 110.0, "sim_int(us)": 100.0, "sim_platform": "test"}


def _save(path, rows, sweep):
    args = {"sweep": sweep} if sweep else {}
    save_records(path, "kernel", pd.DataFrame(rows), {"config": {"args": args}, "provenance": {"date": "2026-12-01"}})


def _times(wave, inter):
    return {"expert_wave": wave, "interleaved": inter, "expert_wave_local": 80.0, "interleaved_local": 70.0,
            "grouped_mm": 56.0}


def test_fresh_rows_leave_the_earlier_keys_as_they_were(tmp_path):
    _save(tmp_path / "moe" / "a" / "moe-kernel.parquet", _kernel_rows(_times(120.0, 100.0), sim=SIM), None)
    before = R.summarize(tmp_path)
    assert not any(k.startswith("heldout2_") or "rule3" in k for k in before)   # no fresh rows, no rule record
    fresh = _kernel_rows(_times(90.0, 100.0), problem=MoeProblem(256, 128, 700, seed=3), sim=SIM)
    _save(tmp_path / "moe" / "b" / "moe-kernel.parquet", fresh, "heldout2")
    after = R.summarize(tmp_path)
    for key, value in before.items():   # every earlier key keeps its answer
        assert after[key] == value or (isinstance(value, float) and math.isnan(value) and math.isnan(after[key]))
    assert after["heldout2_n_configs"] == 1 and after["heldout2_geomean_speedup_interleaved"] == pytest.approx(0.9)
    assert after["heldout2_names_winner_one_stage"] == 0   # measured 0.9, replayed 1.1: named wrong
    assert math.isfinite(after["heldout2_median_speedup_error_pp_one_stage"])


def test_rule3_keys_appear_with_its_record_and_score_the_fresh_rows(tmp_path):
    (tmp_path / "predictions").mkdir()
    shutil.copy(data_dir() / "predictions" / M.RULE3_RECORD, tmp_path / "predictions" / M.RULE3_RECORD)
    rec = json.loads((tmp_path / "predictions" / M.RULE3_RECORD).read_text())
    rec["platform"] = ""   # the test rows carry no h200 platform column value
    (tmp_path / "predictions" / M.RULE3_RECORD).write_text(json.dumps(rec))
    _save(tmp_path / "moe" / "a" / "moe-kernel.parquet", _kernel_rows(_times(120.0, 100.0), sim=SIM), None)
    fresh = _kernel_rows(_times(90.0, 100.0), problem=MoeProblem(256, 128, 700, seed=3), sim=SIM)
    _save(tmp_path / "moe" / "b" / "moe-kernel.parquet", fresh, "heldout2")
    s = R.summarize(tmp_path)
    assert s["rule3_record"] == "predictions/moe-rule3-fit.json" and s["rule3_drain"] == "platform"
    assert s["rule3_main_n_configs"] == 1 and "heldout_rule3_n_configs" not in s   # no first held-out rows here
    k = pd.DataFrame(fresh)
    want = M.rule3_speedups(k, __import__("xstage.sim.platform", fromlist=["x"]).load_platform("h200-pcie-host"),
                            M.load_rule3(tmp_path))
    assert s["heldout2_median_speedup_error_pp_rule3"] == pytest.approx(abs(want.iloc[0] - 0.9) * 100)


def test_split_fresh_without_a_sweep_column_keeps_every_row():
    k = pd.DataFrame({"config": ["a", "b"]})
    earlier, fresh = H.split_fresh(k)
    assert len(earlier) == 2 and fresh.empty
    earlier, fresh = H.split_fresh(k.assign(sweep=["main", "heldout2"]))
    assert earlier["config"].tolist() == ["a"] and fresh["config"].tolist() == ["b"]
