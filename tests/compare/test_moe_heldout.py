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
