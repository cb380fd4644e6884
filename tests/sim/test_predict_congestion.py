"""The sixth FA rule's model (``sim.predict_congestion``): a backlogged host link stalls every SM at once."""

import math

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel, predict_fa
from xstage.sim.predict_congestion import item_ends, predict_congested, stalled_link
from xstage.sim.schedule_fa import fa_work_items


@pytest.fixture(scope="module")
def host():
    return load_platform("h200-pcie-host")


def test_item_ends_are_each_programs_cumulative_sums():
    sched, share, _ = fa_work_items(3, 8192, 132, block_m=128)
    ml = np.arange(1, len(share) + 1, dtype=float)
    ends = item_ends(sched, ml)
    sm, seq = sched.tiles[:, 4], sched.tiles[:, 5]
    for p in (0, 7, 131):
        sel = np.flatnonzero(sm == p)
        sel = sel[np.argsort(seq[sel])]
        assert ends[sel] == pytest.approx(np.cumsum(ml[sel]))


def test_stall_by_hand():
    # R = 1 byte/us; two 10-byte sends at compute time 0, q_c = 4: the second pushes the backlog to 20, so every
    # program stalls 16 us; a send at compute time 30 (real 46) finds the queue empty: no stall
    out = stalled_link([0.0, 0.0, 30.0, 40.0], [10.0, 10.0, 3.0, 0.0], 1.0, 4.0)
    assert out["stall_us"] == pytest.approx(16.0)
    assert out["compute_end_us"] == pytest.approx(56.0)        # tau_end 40 + 16 us stalled before it
    assert out["drain_end_us"] == pytest.approx(49.0)          # 46 + 3 bytes at 1 byte/us
    assert out["peak_backlog_bytes"] == pytest.approx(20.0)
    free = stalled_link([0.0, 0.0, 30.0, 40.0], [10.0, 10.0, 3.0, 0.0], 1.0, math.inf)
    assert free["stall_us"] == 0.0 and free["drain_end_us"] == pytest.approx(33.0)


@pytest.mark.parametrize("kw", [dict(seq_len=16384), dict(seq_len=32768, send="stagger", send_step_offset=1),
                                dict(seq_len=16384, order="local_last", tail_parts=2, fa_tail_parts=2,
                                     send="stagger", send_step_offset=1, due_over="window", stagger_span=1),
                                dict(seq_len=32768, program_spread=0.0165, fa_program_spread=0.0165)])
def test_fa_only_time_is_the_predictors(host, kw):
    k = FaKernel(heads=3, fa_us=2000.0, **kw)
    assert predict_congested(k, host, 0.35e6)["fa_us"] == pytest.approx(predict_fa(k, host)["fa_us"], rel=1e-12)


def test_tile_end_bursts_pay_a_stall_per_wave_and_staggered_sends_do_not(host):
    drain = FaKernel(seq_len=32768, heads=3, fa_us=2200.0)
    stagger = FaKernel(seq_len=32768, heads=3, fa_us=2200.0, send="stagger", send_step_offset=1)
    q_c = 0.35e6
    d, s = predict_congested(drain, host, q_c), predict_congested(stagger, host, q_c)
    wave_bytes = 132 * 128 * 128 * 2 * 7 / 8
    per_wave = (wave_bytes - q_c) / host.drain_rate_Bpus
    assert d["stall_us"] > 4 * 0.8 * per_wave              # 6 waves, the first five followed by a stall
    assert s["stall_us"] < 0.25 * d["stall_us"]
    assert d["E_res_us"] > 3 * s["E_res_us"]
    unbounded = predict_congested(drain, host, math.inf)
    assert unbounded["stall_us"] == 0.0 and unbounded["E_res_us"] < d["E_res_us"]
    # a lower threshold never costs less
    e = [predict_congested(drain, host, q)["E_res_us"] for q in (0.0, 0.1e6, 0.35e6, 1e6, 4e6)]
    assert all(a >= b - 1e-9 for a, b in zip(e, e[1:]))


def test_drift_spreads_the_bursts_and_lowers_the_stall(host):
    lock = FaKernel(seq_len=65536, heads=3, fa_us=9000.0)
    drift = FaKernel(seq_len=65536, heads=3, fa_us=9000.0, program_spread=0.0116, fa_program_spread=0.0165)
    assert predict_congested(drift, host, 0.35e6)["stall_us"] < 0.5 * predict_congested(lock, host, 0.35e6)["stall_us"]


@pytest.mark.parametrize("bad", [-1.0, "x", None])
def test_bad_threshold_is_refused(host, bad):
    with pytest.raises(InputError, match="q_c_bytes"):
        predict_congested(FaKernel(seq_len=8192), host, bad)
