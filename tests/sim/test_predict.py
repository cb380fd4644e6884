"""The FA exposure predictor: FA-only time taken from the measurement, bytes from the Ulysses layout."""

import math

import pytest

from xstage.errors import InputError
from xstage.sim.platform import Platform, load_platform
from xstage.sim.predict import FaKernel, predict_fa


def test_fa_only_time_is_the_measured_one():
    p = load_platform("h200-pcie-host")
    for M, fa in ((8192, 210.0), (16384, 612.5)):
        r = predict_fa(FaKernel(seq_len=M, fa_us=fa), p)
        assert r["fa_us"] == pytest.approx(fa, rel=1e-12)
        assert r["qloop_us"] == pytest.approx(fa / math.ceil(3 * M / 128 / p.sm_count))


def test_own_chunk_stays_local():
    p = load_platform("h200-pcie-host")
    r = predict_fa(FaKernel(seq_len=16384, world_size=8, fa_us=600.0), p)
    total = 3 * 16384 * 128 * 2
    assert r["remote_MiB"] * 2**20 == pytest.approx(total * 7 / 8)
    uniform = predict_fa(FaKernel(seq_len=16384, world_size=8, fa_us=600.0, remote_fraction=0.5), p)
    assert uniform["remote_MiB"] * 2**20 == pytest.approx(total / 2)


def test_hand_worked_drain_limited_case(toy_platform):
    # 1 program, 1 head, two 8-row tiles (128 B each); W = 2: tile 0 is rank 0's own chunk, tile 1 remote.
    # Q-loop 10 us; tile 1's 128 B issue at 20 us into a 3-byte queue drained at 1 B/us: the queue never
    # empties, so the last byte drains at 20 + 128 us.
    k = FaKernel(seq_len=16, heads=1, head_dim=8, block_m=8, block_n=8, world_size=2, fa_us=20.0, num_sms=1)
    r = predict_fa(k, toy_platform)
    assert r["fa_us"] == pytest.approx(20.0)
    assert r["a2a_us"] == pytest.approx(128.0)
    assert r["fused_us"] == pytest.approx(148.0, rel=1e-9)
    assert r["E_res_us"] == pytest.approx(128.0, rel=1e-9)
    assert r["hiding_ratio"] == pytest.approx(0.0, abs=1e-9)


def test_fast_drain_hides_everything_but_the_last_issue():
    fast = Platform(name="fast", sm_count=132, drain_rate_GBps=1e6, t_fixed_us=0.0, producer_issue_GBps=1e5,
                    capacity_points=((132, 64.0 * 2**20),), target="peer")
    r = predict_fa(FaKernel(seq_len=16384, fa_us=600.0), fast)
    assert 0.0 <= r["E_res_us"] < 0.01
    assert r["speedup_vs_serial"] >= 1.0


def test_stagger_exposes_less_than_tile_end_on_the_host_path():
    p = load_platform("h200-pcie-host")
    end = predict_fa(FaKernel(seq_len=65536, fa_us=9000.0), p)
    stag = predict_fa(FaKernel(seq_len=65536, fa_us=9000.0, send="stagger"), p)
    assert stag["E_res_us"] < end["E_res_us"]


@pytest.mark.parametrize("field,kw", [
    ("seq_len", {"seq_len": 1000}),
    ("seq_len", {"seq_len": 1024, "world_size": 16}),
    ("rank", {"seq_len": 8192, "rank": 8}),
    ("remote_fraction", {"seq_len": 8192, "remote_fraction": 1.5}),
    ("fa_us", {"seq_len": 8192, "fa_us": -1.0}),
    ("send", {"seq_len": 8192, "send": "drip"}),
])
def test_bad_kernel_names_the_field(field, kw):
    with pytest.raises(InputError, match=field):
        FaKernel(**kw)


def test_default_reproduces_the_pre_registered_fa4_prediction():
    # the committed record (data/predictions/fa4-direct-h200-pcie-host.json) was made with the one-stage
    # model; the SM-stage option is off by default, so the same inputs give the same E_res
    fa_us = 4.0 * 8192 * 8192 * 3 * 128 / 557e12 * 1e6
    r = predict_fa(FaKernel(seq_len=8192, fa_us=fa_us), load_platform("h200-pcie-host"))
    assert r["E_res_us"] == pytest.approx(48.785692901697075, rel=1e-9)
    assert r["exit_waits_for_drain"] is False and "sm_store_GBps" not in r


def test_sm_stage_hand_worked(toy_platform):
    # 1 program, 4 tiles of 8 rows x d=8 x 2 B = 128 B; W = 2: tiles 0, 1 local, tiles 2, 3 remote; Q-loop 10 us.
    # Bytes leave the SM at r_sm = 2 B/us into a buffer that never fills, drained at R = 1 B/us; the next
    # tile waits for them: tile 2 ends at 30 and sends until 94; tile 3 runs 94-104 and sends until 168.
    # Buffer: +1 B/us over 30-94 (64 B), -1 B/us over 94-104 (54 B), +1 B/us over 104-168 (118 B), empty at 286.
    k = FaKernel(seq_len=32, heads=1, head_dim=8, block_m=8, block_n=8, world_size=2, fa_us=40.0, num_sms=1,
                 exit_waits_for_drain=True, sm_store_GBps=0.002, shared_buffer_MiB=1.0)
    r = predict_fa(k, toy_platform)
    assert r["fa_us"] == pytest.approx(40.0)
    assert r["fused_us"] == pytest.approx(286.0, rel=1e-9)
    assert r["E_res_us"] == pytest.approx(246.0, rel=1e-9)
    assert r["fused_peak_queue_MiB"] * 2**20 == pytest.approx(118.0, rel=1e-9)
    assert r["sm_store_GBps"] == 0.002 and r["shared_buffer_MiB"] == 1.0


def test_sm_stage_exposes_the_wave_bursts_that_the_one_stage_model_hides():
    # FA4-like: one tile per CTA per wave; with the SM stage each wave's 4 MiB burst waits on the SMs
    p = load_platform("h200-pcie-host")
    for M, fa in ((8192, 184.4), (65536, 9173.0)):
        one = predict_fa(FaKernel(seq_len=M, heads=3, fa_us=fa, remote_fraction=1.0), p)
        two = predict_fa(FaKernel(seq_len=M, heads=3, fa_us=fa, remote_fraction=1.0, exit_waits_for_drain=True), p)
        assert two["fa_us"] == pytest.approx(one["fa_us"])
        assert two["E_res_us"] > one["E_res_us"]
        assert two["fused_peak_queue_MiB"] <= 0.78 + 1e-9
        assert 0.0 <= two["hiding_ratio"] < one["hiding_ratio"]


@pytest.mark.parametrize("field,kw", [
    ("sm_store_GBps", {"sm_store_GBps": 0.0}),
    ("shared_buffer_MiB", {"shared_buffer_MiB": -1.0}),
    ("exit_waits_for_drain", {"exit_waits_for_drain": "yes"}),
])
def test_bad_sm_stage_names_the_field(field, kw):
    with pytest.raises(InputError, match=field):
        FaKernel(seq_len=8192, **kw)
