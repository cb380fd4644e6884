"""``FaKernel.stagger_span`` / ``due_over``: the FA4 split kernels' send rules (``sim.predict_sends``); defaults unchanged."""

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.hw.attention.fa4_persistent import split_plan, split_window
from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel, _staggered, predict_fa
from xstage.sim.predict_sends import send_window, split_send_mainloops, unit_steps
from xstage.sim.schedule_fa import fa_work_items

HOST = load_platform("h200-pcie-host")
LAW = dict(exit_waits_for_drain=True, sm_store_GBps=52.8, shared_buffer_MiB=0.01)


def _split(M, sms=132):
    s, share, owner = fa_work_items(3, M, sms, order="local_last", world_size=8, tail_parts=2)
    return s, share, owner, unit_steps(s, share, M // 128)


@pytest.mark.parametrize("kw", [dict(), dict(send="stagger"), dict(send="stagger", send_step_offset=1, **LAW),
                                dict(send="stagger", order="local_last", tail_parts=2, fa_tail_parts=2, **LAW)])
def test_defaults_are_todays_answers(kw):
    a = predict_fa(FaKernel(seq_len=16384, fa_us=560.0, **kw), HOST)
    b = predict_fa(FaKernel(seq_len=16384, fa_us=560.0, stagger_span=2, due_over="tile", **kw), HOST)
    assert a == b and "stagger_span" not in a and "due_over" not in a


def test_unit_rule_without_a_split_is_the_tile_rule():
    kw = dict(seq_len=16384, fa_us=560.0, send="stagger", send_step_offset=1, order="local_last", **LAW)
    got = {}
    for span in (1, 2):
        a = predict_fa(FaKernel(**kw, stagger_span=span), HOST)
        b = predict_fa(FaKernel(**kw, stagger_span=span, due_over="unit"), HOST)
        assert b["E_res_us"] == pytest.approx(a["E_res_us"], rel=1e-9) and b["due_over"] == "unit"
        got[span] = a
    assert got[2] == predict_fa(FaKernel(**kw), HOST) and got[1]["stagger_span"] == 1
    s, share, _ = fa_work_items(3, 16384, 132, order="local_last", world_size=8)
    one, two = (_staggered(FaKernel(**kw, stagger_span=span), s, share * 180.0) for span in (1, 2))
    b15 = s.tiles[:, 4] == 15                 # span 1: the send 1 + 15 * 128 // 16 steps in, not 1 + 15 * 128 // 32
    assert one[b15][0] - two[b15][0] == pytest.approx((120 - 60) * 180.0 / 128)


def test_unit_steps_are_fa4s_split_arithmetic():
    s, share, owner, st = _split(16384)
    assert set(st[share == 1.0]) == {128} and set(st[share == 0.5]) == {64}
    s, share, _ = fa_work_items(3, 8192, 132, tail_parts=2)
    assert set(unit_steps(s, share, 63)[share == 0.5]) == {31, 32}   # odd n: ceil(n / 2) and the rest


@pytest.mark.parametrize("M, sms", [(8192, 132), (16384, 132), (32768, 132), (65536, 132), (16384, 131)])
def test_window_is_the_kernels(M, sms):
    s, share, owner, st = _split(M, sms)
    whole, _, units, grid = split_plan(3 * M // 128, sms)
    for b in range(sms):
        lo, hi = s.sm_offsets[b], s.sm_offsets[b + 1]
        for j in np.flatnonzero(owner[lo:hi]):
            got = 0 if j == hi - lo - 1 else send_window(int(j), st[lo:hi], owner[lo:hi], "window")[1]
            assert got == split_window(int(s.tiles[lo + j, 6]), whole, units, grid, M // 128)


@pytest.mark.parametrize("rule, span", [("unit", 2), ("unit", 1), ("window", 1)])
def test_sends_keep_compute_and_bytes_and_fall_in_their_window(rule, span):
    s, share, owner, st = _split(16384)
    ml = share * 180.0
    nbytes = np.where(owner, 32768.0, 0.0)
    out, ob = split_send_mainloops(s, ml, nbytes, owner, st, rule, span, 1)
    assert ob.sum() == nbytes.sum() and np.all(out >= 0)
    for b in (0, 1, 5, 17, 110, 131):
        lo, hi = s.sm_offsets[b], s.sm_offsets[b + 1]
        E, B = np.cumsum(ml[lo:hi]), np.cumsum(out[lo:hi])
        assert B[-1] == pytest.approx(E[-1])
        staged = np.flatnonzero(owner[lo:hi])
        sends = np.flatnonzero(ob[lo:hi])
        assert len(sends) == len(staged)
        for j, k in zip(staged, sends):   # each staged item's bytes leave after its compute, within its window
            window = [j] if j == hi - lo - 1 else send_window(int(j), st[lo:hi], owner[lo:hi], rule)[0]
            assert E[j] - 1e-9 <= B[k] <= E[window[-1]] + 1e-9


def test_split_unit_squeezes_the_last_whole_waves_sends():
    # 16K: CTA b runs two whole tiles and then half units; "unit" sends its last whole tile at hook call
    # 1 + (b mod 16) * 64 // 32 of the half unit, "window" spread over the half units up to the next staging one
    s, share, owner, st = _split(16384)
    ml = share * 180.0
    nbytes = np.where(owner, 32768.0, 0.0)
    unit, _ = split_send_mainloops(s, ml, nbytes, owner, st, "unit", 2, 1)
    win, _ = split_send_mainloops(s, ml, nbytes, owner, st, "window", 1, 1)
    b = 15                               # odd: an owner; units whole, whole, owner, owner
    lo = s.sm_offsets[b]
    assert np.cumsum(unit[lo:lo + 4])[1] == pytest.approx(360.0 + (1 + 15 * 64 // 32) * 90.0 / 64)
    assert np.cumsum(win[lo:lo + 4])[1] == pytest.approx(360.0 + (1 + 15 * 63 // 16) * 90.0 / 64)
    b = 14                               # even: a partner; its last whole tile's window runs over both half units
    lo = s.sm_offsets[b]
    calls = 2 * 63
    due = 1 + 14 * calls // 16
    assert np.cumsum(win[lo:lo + 4])[2] == pytest.approx(360.0 + 90.0 + (due - 63) * 90.0 / 64)


@pytest.mark.parametrize("kw, needle", [
    ({"due_over": "ever"}, "due_over"),
    ({"due_over": "unit"}, "needs send=stagger"),
    ({"send": "stagger", "due_over": "window", "hold": "next_epilogue"}, "needs send=stagger and hold=issue"),
    ({"stagger_span": 1}, "only applies with send=stagger"),
    ({"send": "stagger", "stagger_span": 0}, "stagger_span"),
    ({"send": "stagger", "stagger_span": 1, "send_step_offset": 5}, "past the 64 K/V steps"),
])
def test_bad_send_rule_names_the_field(kw, needle):
    with pytest.raises(InputError, match=needle):
        FaKernel(seq_len=8192, **kw)
