"""``FaKernel.send_step_offset``: the persistent FA4 stagger's send, one K/V step later than the Triton kernel's."""

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel, _staggered, predict_fa
from xstage.sim.schedule_fa import fa_work_items, send_due_steps, staggered_mainloops


def _items(M=8192):
    s, share, _ = fa_work_items(3, M, 132)
    return s, share * 90.0


def test_offset_zero_is_the_triton_stagger():
    s, ml = _items()
    k = FaKernel(seq_len=8192, send="stagger")
    assert np.array_equal(_staggered(k, s, ml), staggered_mainloops(s, ml, k.kv_steps))


def test_offset_moves_every_send_one_kv_step_later():
    s, ml = _items()
    k = FaKernel(seq_len=8192, send="stagger", send_step_offset=1)   # 64 K/V steps, 192 tiles on 132 programs
    out = _staggered(k, s, ml)
    sm = s.tiles[:, 4]
    for p in (0, 15, 16, 59):   # two tiles each: first + delta, last - delta, delta = (due + 1) steps
        d = (int(send_due_steps(np.array([p]), 64)[0]) + 1) * 90.0 / 64
        assert out[sm == p].tolist() == pytest.approx([90.0 + d, 90.0 - d])
    assert out[sm == 100].tolist() == [90.0]      # one tile: sent at its end
    assert out.sum() == pytest.approx(ml.sum())


def test_predictor_uses_it_and_reports_it():
    p = load_platform("h200-pcie-host")
    kw = dict(seq_len=8192, fa_us=188.8, send="stagger", exit_waits_for_drain=True, sm_store_GBps=52.8,
              shared_buffer_MiB=0.01)
    a, b = predict_fa(FaKernel(**kw), p), predict_fa(FaKernel(**kw, send_step_offset=1), p)
    assert "send_step_offset" not in a and b["send_step_offset"] == 1
    assert b["fa_us"] == pytest.approx(a["fa_us"]) and b["E_res_us"] != pytest.approx(a["E_res_us"])


@pytest.mark.parametrize("kw, needle", [
    ({"send": "stagger", "send_step_offset": -1}, "send_step_offset"),
    ({"send": "stagger", "send_step_offset": 1.5}, "send_step_offset"),
    ({"send_step_offset": 1}, "only applies with send=stagger"),
    ({"send": "stagger", "send_step_offset": 34}, "past the 64 K/V steps"),
])
def test_bad_offset_names_the_field(kw, needle):
    with pytest.raises(InputError, match=needle):
        FaKernel(seq_len=8192, **kw)
