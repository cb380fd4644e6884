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
