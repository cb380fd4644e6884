"""Schema 2's issue-law fields (start skew, store buffer): the law, the files, the fit that recovers them."""

import json

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.sim import fit
from xstage.sim.platform import Platform

BASE = dict(name="p", sm_count=132, drain_rate_GBps=50.0, t_fixed_us=0.1, producer_issue_GBps=50.0,
            capacity_points=((1, 1e6),), sm_outstanding_bytes=16384.0)


def test_issue_law_adds_the_start_range_and_the_store_buffer():
    p = Platform(**BASE, start_skew_us=0.3, store_buffer_bytes=4096.0)
    for K, B in ((1, 2048), (4, 65536), (132, 32768)):
        want = 0.1 + max(B - 4096, 0) / 50e3 + 0.3 * (K - 1) / (K + 1)
        assert p.issue_time0_us(K, B) == pytest.approx(want, rel=1e-12)
    assert p.issue_time0_us(1, 2048) == pytest.approx(0.1)            # one producer: no skew; inside the buffer


def test_fields_written_only_when_set_and_round_trip():
    plain = Platform(**BASE)
    assert "start_skew_us" not in plain.to_dict() and "store_buffer_bytes" not in plain.to_dict()
    p = Platform(**BASE, start_skew_us=0.25, store_buffer_bytes=3072.0)
    d = json.loads(p.to_json())
    assert d["schema_version"] == 2 and d["start_skew_us"] == 0.25 and d["store_buffer_bytes"] == 3072.0
    assert Platform.from_dict(d) == p
    with pytest.raises(InputError, match="start_skew_us"):
        Platform(**BASE, start_skew_us=-1.0)
    with pytest.raises(InputError, match="store_buffer_bytes"):
        Platform(**BASE, store_buffer_bytes="4KiB")


def test_fit_recovers_skew_and_buffer_and_not_without_them():
    K = np.repeat([4, 8, 16, 33, 66, 132], 9).astype(float)
    B = np.tile(1024.0 * np.array([2, 4, 8, 12, 16, 24, 32, 48, 64]), 6)
    T = 0.12 + np.maximum(B - 6144, 0) / 51e3 + 0.27 * (K - 1) / (K + 1)
    got = fit.fit_issue_time0(K, B, T, skew=True, buffers=tuple(1024 * k for k in range(17)))
    assert got["store_buffer_bytes"] == 6144 and got["injection_GBps"] is None
    assert got["start_skew_us"] == pytest.approx(0.27, rel=1e-2) and got["t_fixed_us"] == pytest.approx(0.12, rel=2e-2)
    assert got["producer_issue_GBps"] == pytest.approx(51.0, rel=1e-2) and got["max_abs_rel_residual"] < 1e-2
    plain = fit.fit_issue_time0(K, B, T)                              # the v1 law cannot follow it
    assert plain["start_skew_us"] is None and plain["max_abs_rel_residual"] > 0.05
