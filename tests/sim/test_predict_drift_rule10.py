"""The tenth FA rule's shape helpers: one head's K/V bytes, and the nearest-point read of a fitted drift."""

import pytest

from xstage.errors import InputError
from xstage.sim.predict_drift import drift_at, drift_nearest, kv_head_bytes


def test_kv_head_bytes_is_k_plus_v_of_one_head():
    assert kv_head_bytes(53248, 128) == 2 * 53248 * 128 * 2
    assert kv_head_bytes(1024, 64, elem_bytes=4) == 2 * 1024 * 64 * 4


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_kv_head_bytes_rejects_bad_sizes(bad):
    with pytest.raises(InputError):
        kv_head_bytes(bad, 128)


def test_drift_nearest_steps_where_drift_at_interpolates():
    per = {27.3e6: 0.026, 29.4e6: 0.072}
    assert drift_nearest(per, 27.9e6) == 0.026
    assert drift_nearest(per, 28.9e6) == 0.072
    assert drift_nearest(per, 28.35e6) == 0.026          # a tie goes to the smaller key
    assert drift_nearest(per, 1e9) == 0.072               # held beyond the ends
    assert 0.026 < drift_at({52: 0.026, 56: 0.072}, 54) < 0.072


def test_drift_nearest_rejects_empty_and_nan():
    with pytest.raises(InputError):
        drift_nearest({}, 1.0)
    with pytest.raises(InputError):
        drift_nearest({1: 0.1}, float("nan"))
