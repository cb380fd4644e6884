"""The exact closed forms of ``xstage.sim.model`` against the simulator at random points, every mode.

Each point runs the simpy engine past the closed-form warm-up (``model.warmup_bursts``) and checks every
steady burst, and that the burst before the warm-up ends is not yet steady (so the warm-up is exact).
"""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from xstage.sim import model
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import Platform

points = st.tuples(st.floats(1.0, 1000.0), st.floats(0.0, 1.0), st.floats(1.0, 200.0), st.floats(1e3, 1e7),
                   st.integers(1, 16), st.integers(64, 1 << 20), st.floats(0.0, 1.0))


def _case(point):
    R_GBps, t_fixed, issue_GBps, Q, K, B, gfrac = point
    P = Platform("rnd", 16, R_GBps, t_fixed, issue_GBps, ((K, Q),))
    V, R, t0 = K * B, P.drain_rate_Bpus, P.issue_time0_us(K, B)
    G = gfrac * 2.0 * max(model.recovery_gap_us(t0, V, R), Q / R)   # around G* and the drained-start gap Q/R
    return P, K, B, G, V, R, t0, P.capacity_bytes(K)


def _steady_case(point):
    """``_case`` and its closed-form warm-up w, for the cases whose warm-up is short enough to simulate."""
    P, K, B, G, V, R, t0, Q = _case(point)
    w = model.warmup_bursts(G, t0, V, R, Q)
    assume(w < 300)
    return P, K, B, G, V, R, t0, Q, w


def _clock(bursts, ulps: int = 64) -> float:
    """The simulated clock's resolution at the end of ``bursts`` (``ulps`` ulps of the last start)."""
    return ulps * math.ulp(float(bursts["start(us)"].max()) + 1.0)


@settings(max_examples=60, deadline=None)
@given(points)
def test_periodic_steady_state_and_warmup_are_exact(point):
    P, K, B, G, V, R, t0, Q, w = _steady_case(point)
    n = w + 4
    b = simulate_bursts(P, BurstConfig(K, B, G, n, engine="simpy")).bursts
    first = b[b["producer"] == 0]
    issue, period = first["issue(us)"].to_numpy(), first["period(us)"].to_numpy()
    clock = _clock(first)
    t_iss = model.issue_time_with_capacity_us(G, t0, V, R, Q)
    assert np.allclose(issue[w:], t_iss, rtol=1e-9, atol=clock)
    assert np.allclose(period[w:-1], model.periodic_period_us(G, t0, V, R, Q), rtol=1e-9, atol=clock)
    # the recurrence itself, burst by burst; the last warm-up burst is short of the steady issue time
    delta, cap = V - R * (t0 + G), Q - R * G
    if w > 0:
        assert max(t0, (V - Q + (w - 1) * delta) / R) < t_iss
    q = 0.0
    for k in range(n):
        assert issue[k] == pytest.approx(max(t0, (V - Q + q) / R), rel=1e-9, abs=clock)
        q = max(min(q + delta, cap), 0.0)


@settings(max_examples=40, deadline=None)
@given(points, st.sampled_from(["isolated", "coupled"]))
def test_isolated_and_coupled_closed_forms(point, mode):
    P, K, B, G, V, R, t0, Q = _case(point)
    b = simulate_bursts(P, BurstConfig(K, B, G, 4, mode=mode, engine="simpy")).bursts
    issue, period = b["issue(us)"].to_numpy(), b["period(us)"].to_numpy()
    if mode == "isolated":
        assert np.allclose(issue, model.isolated_issue_time_us(t0, V, R, Q), rtol=1e-9)
        assert np.allclose(period[~np.isnan(period)], model.isolated_period_us(G, t0, V, R), rtol=1e-9)
    else:
        assert np.allclose(issue, model.coupled_issue_time_us(t0, V, R), rtol=1e-9)
        assert np.allclose(period[~np.isnan(period)], model.coupled_period_us(G, V, R, t0), rtol=1e-9)


def test_coupled_form_where_issue_dominates():
    # the audit's case: K = 4 x 32 KiB at G = 3 us on paper-b200: V/R = 0.18 us, T_iss0 = 0.76 us
    from xstage.sim.platform import load_platform
    P = load_platform("paper-b200")
    V, R, t0 = 4 * 32768, P.drain_rate_Bpus, P.issue_time0_us(4, 32768)
    s = simulate_bursts(P, BurstConfig(4, 32768, 3.0, 10, mode="coupled", engine="simpy")).summary(P)
    assert s["T_iss_us"] == pytest.approx(0.76, rel=1e-9) and s["model_T_iss_us"] == pytest.approx(0.76, rel=1e-12)
    assert s["model_period_us"] == pytest.approx(3.76, rel=1e-12) and V / R < t0


def test_warmup_closed_form_edges():
    assert model.warmup_bursts(0.0, 1.0, 10.0, 1.0, 100.0) == math.ceil(100 / 9)
    assert model.warmup_bursts(5.0, 1.0, 5.0, 1.0, 100.0) == 0          # Delta < 0: every burst starts empty
    assert model.warmup_bursts(200.0, 1.0, 500.0, 1.0, 100.0) == 0      # R G >= Q: drained at every start
    assert model.periodic_period_us(200.0, 1.0, 500.0, 1.0, 100.0) == pytest.approx(600.0)  # (V - Q)/R + G


@settings(max_examples=30, deadline=None)
@given(points)
def test_cli_model_headline_agrees_with_the_simulator(point):
    """`xstage model`'s T_iss_us / period_us / coupled / isolated figures are the simulator's steady state."""
    from xstage.sim.scenarios import burst_model
    P, K, B, G, V, R, t0, Q, w = _steady_case(point)
    m = burst_model(P, K, B, G)
    for mode, t_key, p_key in (("periodic", "T_iss_us", "period_us"), ("coupled", "T_iss_coupled_us",
                                                                        "period_coupled_us"),
                               ("isolated", "T_iss_iso_us", "period_iso_us")):
        b = simulate_bursts(P, BurstConfig(K, B, G, w + 3, mode=mode, engine="simpy")).bursts
        last = b[b["burst"] == w + 1]
        # 1024 ulps of the clock (2e-13 of it): a coupled burst's end is a drain mark, several snaps later,
        # and the clock carries the rounding of every earlier step (points (1.0, 0.0, 30.0, 8191999.0, 5, 70,
        # 1.0) and (1.0, 0.0, 153.0, 1024000.0, 4, 64, 1.0) are off by 65 and 285 ulps, before schema 2 too)
        clock = _clock(b, ulps=1024)
        assert last["issue(us)"].iloc[0] == pytest.approx(m[t_key], rel=1e-9, abs=clock), mode
        assert last["period(us)"].iloc[0] == pytest.approx(m[p_key], rel=1e-9, abs=clock), mode


def test_cli_model_counts_the_overrun():
    # V = 132 x 64 KiB = 8.25 MiB > Q = 3.79 MiB on paper-b200, G = 40 us >= Q/R: every burst starts drained
    from xstage.sim.scenarios import burst_model
    from xstage.sim.platform import load_platform
    P = load_platform("paper-b200")
    m = burst_model(P, 132, 65536, 40.0)
    V, R, Q = 132 * 65536, P.drain_rate_Bpus, P.capacity_bytes(132)
    assert m["T_iss_us"] == pytest.approx((V - Q) / R) and m["T_iss_eq3_us"] < m["T_iss_us"] / 2
    assert m["period_us"] == pytest.approx((V - Q) / R + 40.0)
    s = simulate_bursts(P, BurstConfig(132, 65536, 40.0, 6, engine="simpy")).summary(P)
    assert s["T_iss_us"] == pytest.approx(m["T_iss_us"], rel=1e-9)


def test_demo_burst_sweeps_are_steady_and_exact():
    """The demo's 'largest relative error' compares steady windows with the exact steady state."""
    from xstage.demo import burst_sweeps
    from xstage.sim.platform import load_platform
    P = load_platform("paper-b200")
    rows = burst_sweeps(P)
    periodic = rows[rows["mode"] == "periodic"]
    assert periodic["steady"].all() and (periodic["engine"] == "simpy").all()
    err = ((periodic["T_iss_us"] - periodic["model_T_iss_us"]).abs() / periodic["model_T_iss_us"]).max()
    assert err < 1e-9
    g_star = model.recovery_gap_us(P.issue_time0_us(148, 32768), 148 * 32768, P.drain_rate_Bpus)
    assert periodic["gap_us"].min() == 0.0 and (periodic["gap_us"] >= 0).all()
    assert not ((periodic["gap_us"] < g_star) & (periodic["gap_us"] > g_star - 1e-4)).any()  # no gap a hair below G*
