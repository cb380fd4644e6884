"""``sim.predict_drift.steps_regime`` (the twelfth FA rule's regime: K/V steps per Q tile, M // block_n)."""

import pytest

from xstage.errors import InputError
from xstage.sim.predict_drift import STEP_BOUNDS, steps_regime


def test_regimes_by_kv_steps_per_q_tile():
    assert STEP_BOUNDS == (384, 480)
    assert steps_regime(49152, 128) == "low"        # 384 steps: still low
    assert steps_regime(51200, 128) == "band"
    assert steps_regime(61440, 128) == "high"       # 480 steps
    assert steps_regime(32768, 64) == "high"        # 512 steps at half the block: the M of 64K at block_n 128
    assert steps_regime(20480, 64) == "low"         # 320
    assert steps_regime(131072, 256) == "high"


def test_the_bounds_are_parameters():
    assert steps_regime(51200, 128, low_max=400) == "low"
    assert steps_regime(51200, 128, low_max=300, high_min=390) == "high"


@pytest.mark.parametrize("kw", [dict(seq_len=0, block_n=64), dict(seq_len=1000, block_n=64),
                                dict(seq_len=4096, block_n=1.5), dict(seq_len=4096, block_n=64, low_max=500)])
def test_bad_input_is_named(kw):
    with pytest.raises(InputError):
        steps_regime(**kw)
