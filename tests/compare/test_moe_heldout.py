"""The held-out MoE keys: only the rows of runs recorded with ``--sweep heldout``, prefixed ``heldout_``."""

import math

import pandas as pd
import pytest

from xstage.compare import moe_records as R
from xstage.records import save_records
from xstage.sim.workloads.moe_layout import MoeProblem

from tests.compare.test_moe_records import _kernel_rows


def _save(path, rows, sweep):
    args = {"sweep": sweep} if sweep else {}
    save_records(path, "kernel", pd.DataFrame(rows), {"config": {"args": args}, "provenance": {"date": "2026-12-01"}})


def test_heldout_keys_come_from_heldout_runs_only(tmp_path):
    sim = {"sim_wave(us)": 110.0, "sim_int(us)": 100.0, "sim_platform": "test"}
    main = _kernel_rows({"expert_wave": 120.0, "interleaved": 100.0, "expert_wave_local": 80.0,
                         "interleaved_local": 70.0, "grouped_mm": 56.0}, sim=sim)
    held = _kernel_rows({"expert_wave": 90.0, "interleaved": 100.0, "expert_wave_local": 50.0,
                         "interleaved_local": 60.0, "grouped_mm": 40.0}, problem=MoeProblem(256, 128, 700, seed=3),
                        sim=sim)
    _save(tmp_path / "moe" / "a" / "moe-kernel.parquet", main, None)   # an older run: no sweep recorded
    assert not any(k.startswith("heldout_") for k in R.summarize(tmp_path))
    _save(tmp_path / "moe" / "b" / "moe-kernel.parquet", held, "heldout")
    s = R.summarize(tmp_path)
    assert s["n_configs"] == 2 and s["heldout_n_configs"] == 1
    assert s["heldout_geomean_speedup_interleaved"] == pytest.approx(0.9)
    assert s["heldout_sign_agreement_with_sim"] == 0.0   # measured 0.9, replayed 1.1: named wrong
    assert s["sign_agreement_with_sim"] == pytest.approx(0.5)
    assert math.isfinite(s["heldout_median_speedup_error_pp"])


def test_replay_rebuilds_a_balanced_records_schedules():
    from xstage.sim.platform import load_platform
    from xstage.sim.schedules import make_moe_schedule
    from xstage.sim.workloads.moe_layout import dispatch_layout

    from tests.compare.test_moe_records import PROBLEM

    rows = pd.DataFrame(_kernel_rows({"expert_wave": 120.0, "interleaved": 100.0}))
    plat = load_platform("paper-b200")
    plain = R.resimulate(rows, plat, "p")
    bal = R.resimulate(rows.assign(balance=True), plat, "p")
    assert R.balanced(rows.assign(balance=True).iloc[0]) and not R.balanced(rows.iloc[0])
    lay = dispatch_layout(PROBLEM)
    timings = {"l1_us": 6.0, "l2_us": 3.0, "l1_epilogue_us": 0.5, "l2_epilogue_us": 1.0}
    want = R.simulate(lay, make_moe_schedule("expert_wave", lay.grid, 8, balance=True), timings, plat)
    assert bal["sim_wave(us)"].iloc[0] == pytest.approx(want)
    assert plain["sim_wave(us)"].iloc[0] == pytest.approx(
        R.simulate(lay, make_moe_schedule("expert_wave", lay.grid, 8), timings, plat))
