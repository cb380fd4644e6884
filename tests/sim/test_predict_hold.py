"""``FaKernel.hold`` / ``replay(cover_per_tile_us=...)``: a store that holds its SM only at the next epilogue."""

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel, _hold_us, predict_fa
from xstage.sim.replay import ReplayConfig, replay
from xstage.sim.schedule_fa import fa_work_items, send_due_steps

P = load_platform("h200-pcie-host")
LAW = dict(exit_waits_for_drain=True, sm_store_GBps=52.8, shared_buffer_MiB=0.01)


def test_replay_per_tile_cover_engines_agree_and_none_is_cover_us():
    s, share, _ = fa_work_items(3, 16384, 132)
    ml, nb = share * 60.0, np.full(len(share), 32768.0)
    cfg = ReplayConfig(staging_slots=0, cover_us=0.0, remote_epilogue_us=0.0, local_epilogue_us=0.0,
                       record_occupancy=False)
    base = replay(s, ml, nb, P, cfg)
    assert replay(s, ml, nb, P, cfg, cover_per_tile_us=np.zeros(len(ml))).makespan_us == base.makespan_us
    a = replay(s, ml, nb, P, cfg, cover_per_tile_us=ml)
    b = replay(s, ml, nb, P, replace_engine(cfg), cover_per_tile_us=ml)
    assert a.makespan_us == pytest.approx(b.makespan_us, rel=1e-9)
    assert a.makespan_us < base.makespan_us            # the next mainloop no longer waits for the store
    # a full-tile cover with one staging slot is the double-buffered slot (S = 2, no cover)
    two = replay(s, ml, nb, P, ReplayConfig(staging_slots=2, cover_us=0.0, remote_epilogue_us=0.0,
                                            local_epilogue_us=0.0, record_occupancy=False))
    assert a.makespan_us == pytest.approx(two.makespan_us, rel=1e-9)
    with pytest.raises(InputError, match="cover_per_tile_us"):
        replay(s, ml, nb, P, cfg, cover_per_tile_us=-ml)


def replace_engine(cfg):
    from dataclasses import replace
    return replace(cfg, engine="simpy")


def test_hold_window_is_up_to_the_tiles_own_end():
    s, share, _ = fa_work_items(3, 8192, 132)
    ml = share * 90.0
    k = FaKernel(seq_len=8192, send="stagger", send_step_offset=1, hold="next_epilogue")
    win = _hold_us(k, s, ml)
    sm = s.tiles[:, 4]
    d = (int(send_due_steps(np.array([15]), 64)[0]) + 1) * 90.0 / 64
    assert win[sm == 15].tolist() == pytest.approx([90.0, 90.0 - d])   # second tile: from its send point to its end
    assert _hold_us(FaKernel(seq_len=8192), s, ml) is None
    assert np.array_equal(_hold_us(FaKernel(seq_len=8192, hold="next_epilogue"), s, ml), ml)


def test_default_is_today_and_next_epilogue_hides_more():
    for send, off in (("tile_end", 0), ("stagger", 1)):
        kw = dict(seq_len=32768, fa_us=2240.0, send=send, send_step_offset=off, **LAW)
        a, b = predict_fa(FaKernel(**kw), P), predict_fa(FaKernel(**kw, hold="issue"), P)
        assert a == b and "hold" not in a
        c = predict_fa(FaKernel(**kw, hold="next_epilogue"), P)
        assert c["hold"] == "next_epilogue" and c["E_res_us"] < a["E_res_us"]


def test_bad_hold():
    with pytest.raises(InputError, match="hold"):
        FaKernel(seq_len=8192, hold="later")
    with pytest.raises(InputError, match="hold"):
        FaKernel(seq_len=8192, hold="next_epilogue", tail_parts=2)
