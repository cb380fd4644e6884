"""The schema-2 capacity fits recover known parameters from exact isolated-burst figures."""

import numpy as np
import pytest

from xstage.sim import fit_two_stage, model, model_two_stage


def _grid():
    K = np.repeat([4, 16, 33, 66, 132], 8)
    B = np.tile(2.0 ** np.arange(11, 19), 5)
    T0 = 0.3 + B / 60e3
    return K, B, K * B, T0


def test_two_stage_capacity_fit_recovers_shared_and_per_sm():
    K, B, V, T0 = _grid()
    R, qs, qk = 52.8e3, 0.9e6, 16384.0
    T = np.array([model.isolated_issue_time_us(t, v, R, qs + qk * k) for t, v, k in zip(T0, V, K)])
    f = fit_two_stage.fit_two_stage_capacity(K, V, T, T0, R)
    assert f["Q_shared_bytes"] == pytest.approx(qs, rel=0.02) and f["q_sm_bytes"] == pytest.approx(qk, rel=0.02)
    assert f["median_abs_rel_residual"] < 1e-3


def test_relaxing_fit_recovers_rho_and_matches_the_model():
    K, B, V, T0 = _grid()
    R, qs, qk, rho = 52.8e3, 0.7e6, 17000.0, 15e3
    T = np.array([model_two_stage.relaxing_isolated_issue_time_us(t, v, R, qs + qk * k, qs, rho) for t, v, k in zip(T0, V, K)])
    assert np.allclose(fit_two_stage.relaxing_isolated_np(T0, V, R, qs + qk * K, qs, rho), T, rtol=1e-12)
    f = fit_two_stage.fit_relaxing_capacity(K, V, T, T0, R)
    assert f["rho_Bpus"] == pytest.approx(rho, rel=0.05)
    assert f["Q_shared_bytes"] == pytest.approx(qs, rel=0.05) and f["q_sm_bytes"] == pytest.approx(qk, rel=0.05)
