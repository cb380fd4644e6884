"""The equations against the paper's own worked numbers (Sec. 3.5, 4.3)."""

import pytest

from xstage.sim import model
from xstage.sim.platform import load_platform
from xstage.units import KiB, MiB

P = load_platform("paper-b200")
R = P.drain_rate_Bpus
V = 148 * 32 * KiB
T0 = 0.76


def test_fa_worked_example():
    # Sec. 4.3: V ~ 4.6 MiB, [V - R T0]_+ ~ 4.1 MiB < Q, G* ~ 6.0 us, M_ub* ~ 1.0K tokens
    assert V / MiB == pytest.approx(4.625)
    assert model.peak_outstanding_bytes(T0, V, R) / MiB == pytest.approx(4.1, abs=0.01)
    g = model.recovery_gap_us(T0, V, R)
    assert g == pytest.approx(6.0, abs=0.01)
    assert model.fa_seq_upper_bound_tokens(128, g, 0.79) == 1024


def test_max_law_and_overhead():
    assert model.issue_time_us(0.0, T0, V, R) == pytest.approx(V / R)
    assert model.issue_time_us(10.0, T0, V, R) == T0
    assert model.period_us(2.0, T0, V, R) == pytest.approx(V / R)
    assert model.period_us(10.0, T0, V, R) == pytest.approx(10.76)
    assert model.coupled_period_us(2.0, V, R) == pytest.approx(2.0 + V / R)
    assert model.issue_overhead_us(2.0, T0, V, R) == pytest.approx(V / R - 2.0 - T0)
    assert model.issue_overhead_us(7.0, T0, V, R) == 0.0


def test_isolated_knee():
    Q = 4.25 * MiB
    assert model.isolated_issue_time_us(T0, V, R, Q) == T0
    big = 2 * V
    assert model.isolated_issue_time_us(T0, big, R, Q) == pytest.approx((big - Q) / R)


def test_design_test_bounds():
    Q = 4.25 * MiB
    t = model.design_test(2.0, T0, V, R, Q)
    assert not t.rate_bound_ok and t.capacity_bound_ok
    t = model.design_test(6.1, T0, V, R, Q)
    assert t.rate_bound_ok and t.capacity_bound_ok
    t = model.design_test(100.0, T0, 2 * V, R, Q)
    assert t.rate_bound_ok and not t.capacity_bound_ok


def test_interleaving_equations():
    # Eq. 12-14 with n1/n2 = 1: the gap gains one L1 mainloop
    assert model.interleaved_gap_us(5.3, 9.77, 1, 1) == pytest.approx(15.07)
    assert model.interleaved_issue_overhead_us(4.0, 9.77, 1, 1) == 0.0
    assert model.interleaved_issue_overhead_us(4.0, 1.0, 1, 2) == pytest.approx(3.5)
    assert not model.interleaving_sufficient(V, T0, 1.0, 1.0, 1, 1, R)
    assert model.interleaving_sufficient(V, T0, 5.3, 9.77, 1, 1, R)


def test_stall_and_knee():
    # Table 2's DSv4-Pro negative control: a 9.54 us L2 mainloop covers a 7.88 us span
    assert model.tile_stall_us(7.88, 9.54) == 0.0
    assert model.tile_stall_us(9.93, 5.30) == pytest.approx(4.63)
    assert model.lead_knee_rows(128, 148, 2048) == 5


def test_fa_exposure():
    qloop = model.fa_qloop_gap_lower_us(8192, 128, 0.79)
    assert qloop == pytest.approx(64 * 0.79)
    assert model.fa_issue_stall_us(V, R, qloop, T0) == 0.0
    assert model.fa_issue_stall_us(V, R, 1.0, T0) == pytest.approx(V / R - 1.0 - T0)
    assert model.fa_critical_stall_us(3.0, 1.0) == 2.0
    assert model.fa_drain_residual_us(10, 3.0, 1.0) == 20.0
    assert model.fa_coupled_exposure_us(V, R, 2.0, 1.0) == pytest.approx(V / R + 1.0)
