"""The schema-2 capacity fits recover known parameters from exact isolated-burst figures."""

import numpy as np
import pytest

from xstage.sim import fit_two_stage, model


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


def test_relax_rate_search_finds_the_minimum_of_its_loss():
    R = 52.8e3
    for rho in (300.0, 20e3, 45e3):
        f = fit_two_stage.fit_relax_rate(lambda r: (np.log(r) - np.log(rho)) ** 2, R)
        assert f["rho_Bpus"] == pytest.approx(rho, rel=0.01) and f["loss"] < 1e-4
    edge = fit_two_stage.fit_relax_rate(lambda r: -r, R)              # the loss falls to the grid's end
    assert edge["rho_Bpus"] == pytest.approx(0.95 * R, rel=1e-9)


def test_model_check_simulates_where_the_relaxing_form_has_none():
    from xstage.sim import fit, model_two_stage
    from xstage.sim.bursts import BurstConfig, simulate_bursts
    from xstage.sim.platform import Platform
    p = Platform("band", 16, 50.0, 0.0, 100.0, ((1, 1e5),), sm_outstanding_bytes=1e4, capacity_relax_GBps=10.0)
    K, B, G = 16, 24576, 3.0                         # Q_f <= R G < the isolated end level: no closed form
    t0, V, R, Q = p.issue_time0_us(K, B), K * B, p.drain_rate_Bpus, p.capacity_bytes(K)
    assert np.isnan(model_two_stage.relaxing_periodic_issue_time_us(G, t0, V, R, Q, 1e5, 1e4))
    got = fit._two_stage_periodic(p, K, B, G, t0, V, R, Q)
    sim = simulate_bursts(p, BurstConfig(K, B, G, 400, skip=300)).summary(p)["T_iss_us"]
    assert np.isfinite(got) and got == pytest.approx(sim, rel=1e-12)
    assert fit._two_stage_periodic(p, K, B, 0.0, t0, V, R, Q) == pytest.approx(
        model_two_stage.relaxing_periodic_issue_time_us(0.0, t0, V, R, Q, 1e5, 1e4), rel=1e-12)


def test_lockstep_points_start_drained_with_a_relaxing_capacity():
    """A lockstep (``periodic``) point is predicted from a drained start, max(T_iss0, V/R - G, relaxing Eq. 7);
    a free-running point at the same gap keeps the steady state with carry-over."""
    import pandas as pd
    from xstage.sim import fit, model, model_two_stage
    from xstage.sim.platform import Platform
    p = Platform("band", 16, 50.0, 0.0, 100.0, ((1, 1e5),), sm_outstanding_bytes=1e4, capacity_relax_GBps=10.0)
    K, B, G = 16, 24576, 3.0
    t0, V, R, Q = p.issue_time0_us(K, B), K * B, p.drain_rate_Bpus, p.capacity_bytes(K)
    row = {"phase": "gap", "producers": K, "bytes_per_producer": B, "gap(us)": G, "gap_measured(us)": G,
           "T_iss(us)": 1.0, "period(us)": 4.0}
    check = fit.model_check(pd.DataFrame([{**row, "mode": "periodic"}, {**row, "mode": "free"}]), p)
    drained = max(model.issue_time_us(G, t0, V, R),
                  model_two_stage.relaxing_isolated_issue_time_us(t0, V, R, Q, 1e5, 1e4))
    assert check["model_T_iss(us)"].iloc[0] == pytest.approx(drained, rel=1e-12)
    assert check["model_T_iss(us)"].iloc[1] == pytest.approx(fit._two_stage_periodic(p, K, B, G, t0, V, R, Q), rel=1e-12)
    assert check["model_T_iss(us)"].iloc[1] != pytest.approx(drained, rel=1e-3)
