"""Calibration fits on synthetic data: the simulator with a known Platform must be recovered."""

import numpy as np
import pytest

from xstage.sim import fit as calib_fit
from xstage.sim.calib_runner import SimRunner
from xstage.hw.calib.calibrate import CalibConfig, pcie_limit_GBps, sweep
from xstage.sim.platform_fit import fit_platform
from xstage.sim.platform import Platform
from xstage.units import KiB, MiB

HOSTLIKE = Platform(name="synthetic-host", sm_count=132, drain_rate_GBps=50.0, t_fixed_us=1.5,
                    producer_issue_GBps=20.0, injection_GBps=400.0, target="host",
                    capacity_points=((33, 1 * MiB), (66, 2 * MiB), (132, 3 * MiB)))
NOCEILING = Platform(name="synthetic-peer", sm_count=132, drain_rate_GBps=700.0, t_fixed_us=0.12,
                     producer_issue_GBps=51.2, injection_GBps=None, target="peer",
                     capacity_points=((66, 2.5 * MiB), (132, 4.25 * MiB)))

SMALL = CalibConfig(target="host", producers=(16, 66, 132), sizes=(8 * KiB, 32 * KiB, 64 * KiB),
                    gap_configs=((132, 32 * KiB),), gap_fractions=(0.2, 0.5, 0.8, 1.2),
                    iso_producers=(66, 132), iso_sizes=tuple(k * KiB for k in (2, 4, 8, 16, 32, 64, 128, 256)),
                    bursts=12, steady_bytes=8 * MiB, max_bursts=128, iso_bursts=3, trials=1, copy_engine=False)


def _within(value, want, tol=0.02):
    return abs(value - want) <= tol * abs(want)


@pytest.fixture(scope="module", params=[HOSTLIKE, NOCEILING], ids=lambda p: p.name)
def fitted(request):
    truth = request.param
    cfg = SMALL if truth is HOSTLIKE else CalibConfig(**{**SMALL.__dict__, "iso_producers": (66, 132),
                                                         "steady_bytes": 24 * MiB, "max_bursts": 256})
    points, bursts = sweep(cfg, SimRunner(truth), progress=False)
    platform, fit = fit_platform(points, name="fit", target=truth.target, sm_count=132)
    return truth, points, bursts, platform, fit


def test_fit_recovers_R_T_iss0_and_Q_within_2_percent(fitted):
    truth, _, _, got, _ = fitted
    assert _within(got.drain_rate_GBps, truth.drain_rate_GBps)
    for K in (16, 66, 132):
        for B in (4 * KiB, 32 * KiB, 64 * KiB):
            assert _within(got.issue_time0_us(K, B), truth.issue_time0_us(K, B)), (K, B)
    assert _within(got.t_fixed_us, truth.t_fixed_us) and _within(got.producer_issue_GBps, truth.producer_issue_GBps)
    if truth.injection_GBps is None:
        assert got.injection_GBps is None
    else:
        assert _within(got.injection_GBps, truth.injection_GBps)
    for K, Q in truth.capacity_points:
        assert _within(got.capacity_bytes(K), Q), K


def test_model_check_on_simulated_points_is_exact(fitted):
    _, points, _, platform, _ = fitted
    check = calib_fit.model_check(points, platform)
    errs = calib_fit.error_summary(check)
    assert errs["p90_rel_err_T_iss"] < 0.01 and errs["p90_rel_err_period"] < 0.01
    assert errs["isolated_p90_rel_err_T_iss"] < 0.01
    assert errs["n_points"] == len(points[points["mode"] == "periodic"])


def test_eq3_alone_misses_capacity_limited_plateaus():
    # 132 x 64 KiB = 8.25 MiB > Q + R T_iss0: even a drained burst waits for the drain (Eq. 7)
    K, B = 132, 64 * KiB
    t0, V, R, Q = HOSTLIKE.issue_time0_us(K, B), K * B, HOSTLIKE.drain_rate_Bpus, HOSTLIKE.capacity_bytes(K)
    big_gap = 10 * V / R
    assert calib_fit.periodic_issue_time_us(big_gap, t0, V, R, Q) == pytest.approx((V - Q) / R)
    assert calib_fit.periodic_issue_time_us(0.0, t0, V, R, Q) == pytest.approx(V / R)
    assert calib_fit.periodic_issue_time_us(big_gap, t0, 1000.0, R, Q) == t0


def test_fit_issue_time0_exact_forms():
    K = np.repeat([16, 33, 66, 132], 4).astype(float)
    B = np.tile([8, 16, 32, 64], 4) * 1024.0
    T = 0.7 + np.maximum(B / 20e3, K * B / 1000e3)     # the ceiling binds for K > 50 only
    fit = calib_fit.fit_issue_time0(K, B, T)
    assert fit["t_fixed_us"] == pytest.approx(0.7, rel=1e-3)
    assert fit["producer_issue_GBps"] == pytest.approx(20.0, rel=1e-3)
    assert fit["injection_GBps"] == pytest.approx(1000.0, rel=1e-3)
    flat = calib_fit.fit_issue_time0(K, B, 0.7 + B / 20e3)
    assert flat["injection_GBps"] is None and flat["max_abs_rel_residual"] < 1e-4
    with pytest.raises(ValueError):
        calib_fit.fit_issue_time0([1, 2], [16, 32], [1.0, 2.0])


def test_fit_drain_rate_uses_only_backpressured_points():
    V = np.array([1e5, 2e5, 4e5, 8e5])
    period = np.array([3.0, 4.0, 8.0, 16.0])     # the first two are issue-bound
    issue = period.copy()
    issue0 = np.array([3.0, 3.9, 4.0, 5.0])
    fit = calib_fit.fit_drain_rate(V, period, issue, issue0)
    assert fit["used"].tolist() == [False, False, True, True]
    assert fit["R_Bpus"] == pytest.approx(5e4) and fit["drain_limited"]
    none = calib_fit.fit_drain_rate(V, period, issue, issue)
    assert not none["drain_limited"]


def test_fit_capacity_knee_and_lower_bound():
    R, Q = 5e4, 3e6
    V = np.linspace(2e5, 2e7, 12)
    T0 = 2.0 + V / 4e5
    T = np.maximum(T0, (V - Q) / R)
    fit = calib_fit.fit_capacity(V, T, T0, R)
    assert fit["Q_bytes"] == pytest.approx(Q, rel=1e-3) and fit["bound"] == "fit"
    assert fit["R_iso_Bpus"] == pytest.approx(R, rel=1e-6) and fit["Q_iso_bytes"] == pytest.approx(Q, rel=1e-6)
    small = V[:2]
    low = calib_fit.fit_capacity(small, T0[:2], T0[:2], R)
    assert low["bound"] == "lower" and low["n_above_knee"] == 0


def test_pcie_limit_and_config_validation():
    from xstage.errors import InputError
    assert pcie_limit_GBps(5, 16) == pytest.approx(63.015, rel=1e-4)
    assert pcie_limit_GBps(None, 16) is None
    with pytest.raises(InputError, match="multiples of 16"):
        CalibConfig(target="host", sizes=(1000,))
    with pytest.raises(InputError, match="max_bursts"):
        CalibConfig(target="host", bursts=64, max_bursts=32)
    cfg = CalibConfig(target="host", steady_bytes=MiB, bursts=4, max_bursts=100)
    assert cfg.periodic_bursts(64 * KiB) == 16 and cfg.periodic_bursts(4 * KiB) == 100
    assert cfg.periodic_bursts(10 * MiB) == 4
    clipped = CalibConfig(target="host").clipped(78)
    assert max(clipped.producers) == 78 and max(k for k, _ in clipped.gap_configs) == 78
