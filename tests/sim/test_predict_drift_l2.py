"""``sim.predict_drift.l2_regime`` and ``repeat_spread`` (the eleventh FA rule's regime and the repeats' spread)."""

import math

import pytest

from xstage.errors import InputError
from xstage.sim.predict_drift import kv_head_bytes, l2_regime, repeat_spread

L2 = 60 * 2**20


def test_regimes_by_kv_bytes_per_head_against_the_l2():
    assert l2_regime(kv_head_bytes(49152, 128), L2) == "low"          # 24 MiB = 0.4 x L2: still low
    assert l2_regime(kv_head_bytes(51200, 128), L2) == "band"         # 25 MiB
    assert l2_regime(kv_head_bytes(59392, 128), L2) == "band"         # 29 MiB
    assert l2_regime(kv_head_bytes(61440, 128), L2) == "high"         # 30 MiB = one partition
    assert l2_regime(kv_head_bytes(65536, 64), L2) == "low"           # half the bytes at the same M
    assert l2_regime(kv_head_bytes(131072, 64), L2) == "high"
    assert l2_regime(kv_head_bytes(51200, 128), 2 * L2) == "low"      # a larger L2 moves the regime


def test_the_bounds_are_parameters():
    b = kv_head_bytes(51200, 128)
    assert l2_regime(b, L2, low_max=0.45) == "low"
    assert l2_regime(b, L2, low_max=0.3, high_min=0.4) == "high"


@pytest.mark.parametrize("kw", [dict(kv_bytes=0, l2_bytes=L2), dict(kv_bytes=1, l2_bytes=-1),
                                dict(kv_bytes=1.5, l2_bytes=L2), dict(kv_bytes=1, l2_bytes=L2, low_max=0.6)])
def test_bad_input_is_named(kw):
    with pytest.raises(InputError):
        l2_regime(**kw)


def test_repeat_spread():
    s = repeat_spread([18.0, -45.0, -45.0])
    assert s == {"median": -45.0, "min": -45.0, "max": 18.0, "range": 63.0, "n": 3}
    assert repeat_spread([1.0, math.nan, 3.0])["n"] == 2
    with pytest.raises(InputError):
        repeat_spread([math.nan])
