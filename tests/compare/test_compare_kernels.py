"""Kernel records beside the simulator: FlashAttention per M, MoE per configuration."""

import math

import pandas as pd
import pytest

from xstage.compare.attention import attention_error_summary, compare_attention, simulate_like
from xstage.compare.moe import compare_moe, measured_speedups, moe_error_summary, speedup_groups
from xstage.errors import InputError
from xstage.sim.sweep import run_moe_config



def _attention_kernel(M=8192, fa=100.0, serial=130.0, fused=101.0):
    base = {"source": "hw", "experiment": "attention", "config": f"M{M}", "trials": 20, "platform": "paper-b200",
            "M": M, "heads": 3, "head_dim": 128, "world_size": 8, "rank": 0, "block_m": 128, "block_n": 64,
            "flops": 4.0 * M * M * 128 * 3}
    times = {"fa": fa, "serial": serial, "fused": fused, "serial_best": 120.0, "sdpa": 90.0}
    return pd.DataFrame([{**base, "variant": v, "time(us)": t} for v, t in times.items()])


def test_attention_replay_of_a_measured_configuration(b200):
    kernel = pd.concat([_attention_kernel(8192), _attention_kernel(16384, fa=400.0, serial=460.0, fused=402.0)])
    rows = compare_attention(kernel, b200)
    assert rows["M"].tolist() == [8192, 16384]
    assert (rows["simulated_e_res(us)"] >= 0).all()
    assert (rows["simulated_e_cc(us)"] >= rows["simulated_e_res(us)"]).all()
    assert rows["measured_e_res(us)"].tolist() == [1.0, 2.0]
    # 7 of 8 ranks are remote: (W - 1) / W of the output crosses the X-Stage
    total = 3 * 8192 * 128 * 2
    assert math.isclose(rows["simulated_a2a(us)"].iloc[0], total * 7 / 8 / b200.drain_rate_Bpus, rel_tol=1e-12)
    s = attention_error_summary(rows)
    assert s["speedup_sign_agreement"] == 1.0
    one = simulate_like({"M": 8192, "heads": 3, "head_dim": 128, "world_size": 8, "fa_us": 100.0}, b200)
    assert one["simulated_fa_only(us)"] == pytest.approx(100.0, rel=0.01)


def test_moe_measured_speedups_are_rerun_and_signed(b200):
    name = "DiT-MoE/w4a8/balanced/S"
    sim = run_moe_config(name, b200)
    kernel = pd.DataFrame([
        {"source": "hw", "experiment": "moe", "config": name, "variant": "expert_wave", "time(us)": 120.0, "trials": 5},
        {"source": "hw", "experiment": "moe", "config": name, "variant": "interleaved", "time(us)": 100.0, "trials": 5},
    ])
    assert measured_speedups(kernel)["measured_speedup"].tolist() == [1.2]
    rows = compare_moe(kernel, b200)
    assert rows["simulated_speedup"].iloc[0] == pytest.approx(sim["speedup"], rel=1e-12)
    s = moe_error_summary(rows)
    assert s["speedup_sign_agreement"] == (1.0 if sim["speedup"] > 1 else 0.0)
    with pytest.raises(InputError, match="expert_wave and interleaved"):
        measured_speedups(kernel.iloc[:1])


def test_speedup_groups_take_geomeans():
    sweep = pd.DataFrame({"model": ["A", "A"], "precision": ["w8a8"] * 2, "routing": ["skewed"] * 2,
                          "speedup": [1.0, 4.0]})
    g = speedup_groups(sweep).iloc[0]
    assert g["geomean_speedup"] == pytest.approx(2.0) and g["min_speedup"] == 1.0 and g["max_speedup"] == 4.0


def test_attention_tiles_meet_their_qloop_replay(b200):
    from xstage.compare.attention import compare_attention_tiles
    from xstage.compare.replays import simulate_fa_tiles

    tiles, _ = simulate_fa_tiles("fa4", 8192, b200)
    fused = tiles[tiles["schedule"] == "fused"]
    hw_like = fused.assign(source="hw", schedule="fused", n=fused["expert"], expert=-1, program=fused["sm"])
    rows = compare_attention_tiles(hw_like, b200)
    row = rows.iloc[0]
    assert row["M"] == 8192 and row["tiles"] == len(fused) and row["programs"] == b200.sm_count
    assert row["simulated_span_median(us)"] == pytest.approx(row["measured_span_median(us)"], rel=0.05)
    assert row["simulated_makespan(us)"] == pytest.approx(row["measured_makespan(us)"], rel=0.01)
    assert compare_attention_tiles(hw_like.assign(schedule="fa"), b200).empty  # only fused tiles issue
    other = hw_like.assign(schedule="fused_wb", **{"issue_end(us)": hw_like["issue_end(us)"] + 50.0})
    mixed = compare_attention_tiles(pd.concat([hw_like, other], ignore_index=True), b200)
    assert mixed.iloc[0]["tiles"] == len(fused)  # the other fused options' tiles are not pooled with "fused"
    assert mixed.iloc[0]["measured_span_median(us)"] == row["measured_span_median(us)"]
