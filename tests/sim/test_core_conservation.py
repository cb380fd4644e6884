"""Long runs: the fluid queue books every byte (issued = drained + outstanding within 1 byte) past 1e7 us.

The audit of issue 19 found the old queue snapping to full with a tolerance of 1e-9 x now: past a few
thousand bursts every gap's drain was undone and 6.7e10 bytes more were drained than issued. These tests
run 20,000 bursts and more, with one producer and with mixed producers, and check the balance at every
instant the queue recorded.
"""

import numpy as np
import pytest
import simpy
from hypothesis import given, settings, strategies as st

from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.fluid import FluidQueue
from xstage.sim.platform import Platform
from xstage.sim.xqueue import FluidXStage

MiB = 2**20


def issue19_platform() -> Platform:
    """R = 67.108864 GB/s, T_iss0 = 0.1 us for 64 MiB (no fixed cost), Q = 32 MiB."""
    return Platform("issue19", 1, 67.108864, 0.0, 64 * MiB / 0.1 / 1e3, ((1, 32 * MiB),))


def balance(log) -> np.ndarray:
    t, lvl, adm, drn = (np.asarray(x) for x in log)
    return adm - drn - lvl


def test_issue19_case_is_exact_after_20000_bursts():
    # V/R = 1000 us, G = 100 us, (V - Q)/R = 500 us: T_iss = max(0.1, 900, 500) = 900, period 1000.
    P = issue19_platform()
    r = simulate_bursts(P, BurstConfig(1, 64 * MiB, 100.0, 20000, engine="simpy"))
    s = r.summary(P)
    assert s["T_iss_us"] == pytest.approx(900.0, rel=1e-12)
    assert s["period_us"] == pytest.approx(1000.0, rel=1e-12)
    last = r.bursts["issue(us)"].to_numpy()[-100:]
    assert np.allclose(last, 900.0, rtol=1e-10, atol=0)   # end - start at t = 2e7 us: ulps of 4e-9 us
    occ = r.occupancy
    assert occ["time(us)"].max() > 1e7
    err = (occ["issued(bytes)"] - occ["drained(bytes)"] - occ["queue(bytes)"]).abs().max()
    assert err <= 1.0
    assert occ["issued(bytes)"].iloc[-1] == pytest.approx(20000 * 64 * MiB, abs=1.0)
    assert occ["drained(bytes)"].iloc[-1] == pytest.approx(20000 * 64 * MiB, abs=1.0)


@settings(max_examples=8, deadline=None)
@given(st.floats(1.0, 1000.0), st.floats(0.01, 10.0), st.floats(550.0, 2000.0), st.floats(0.0, 2.0),
       st.floats(0.05, 4.0), st.integers(1, 4))
def test_conservation_over_20000_bursts(R, t0, drain_us, gap_factor, q_factor, K):
    """Periodic bursts of K producers for 20,000 bursts (t > 1e7 us): balance within 1 byte at every instant."""
    V = R * drain_us                         # V/R = drain_us in [550, 2000] us, so 20,000 periods > 1e7 us
    B = V / K
    P = Platform("h", 4, R / 1e3, 0.0, B / min(t0, drain_us) / 1e3, ((K, q_factor * V),))
    G = gap_factor * drain_us
    r = simulate_bursts(P, BurstConfig(K, int(B), G, 20000, engine="simpy"))
    occ = r.occupancy
    assert occ["time(us)"].max() > 1e7
    err = (occ["issued(bytes)"] - occ["drained(bytes)"] - occ["queue(bytes)"]).abs().max()
    assert err <= 1.0
    Q = P.capacity_bytes(K)
    assert occ["queue(bytes)"].min() >= 0.0 and occ["queue(bytes)"].max() <= Q
    assert occ["issued(bytes)"].iloc[-1] == pytest.approx(K * int(B) * 20000, abs=1.0)


@settings(max_examples=6, deadline=None)
@given(st.lists(st.tuples(st.floats(1e3, 1e6), st.floats(10.0, 1e5), st.floats(500.0, 2000.0)), min_size=2,
                max_size=4), st.floats(50.0, 2000.0), st.floats(1e4, 1e7))
def test_conservation_with_mixed_producers(run_on_queue, producers, R, Q):
    """Producers of different sizes, rates and gaps, 20,000 bursts each, on one queue."""
    n = 20000

    def producer(q, nbytes, rate, gap):
        for _ in range(n):
            yield q.issue(nbytes, rate, gap)

    env, q = run_on_queue(R, Q, lambda env, q: (producer(q, *p) for p in producers))
    total = n * sum(p[0] for p in producers)
    assert env.now > 1e7                  # every producer spends >= 500 us per burst in its gap alone
    assert np.abs(balance(q.log)).max() <= 1.0
    assert q.admitted == pytest.approx(total, abs=1.0) and q.drained == pytest.approx(total, abs=1.0)
    lvl = np.asarray(q.log[1])
    assert lvl.min() >= 0.0 and lvl.max() <= Q


def test_mixed_producers_past_1e7_us():
    """A fixed mixed case that certainly runs past 1e7 us with the queue full part of the time."""
    env = simpy.Environment()
    R, Q = 100.0, 5e4
    q = FluidXStage(env, R, Q)

    def producer(nbytes, rate, gap, n):
        for _ in range(n):
            yield q.issue(nbytes, rate, gap)

    env.process(producer(6e4, 1e4, 300.0, 20000))    # overruns Q alone
    env.process(producer(1e3, 50.0, 0.0, 20000))     # slow, never stops
    env.process(producer(2.5e4, 5e5, 1000.0, 12000))  # rare large bursts
    env.run()
    assert env.now > 1e7
    assert np.abs(balance(q.log)).max() <= 1.0
    assert q.admitted == pytest.approx(20000 * 6.1e4 + 12000 * 2.5e4, abs=1.0)
    assert max(q.log[1]) == Q      # it did fill


def test_core_books_snaps_as_bytes():
    """Driving the pure core by hand: a step past the instant it fills is split there, not clamped."""
    q = FluidQueue(1.0, 4.0)
    q.add(0.0, 10.0, 3.0, "a")         # net 2 B/us: full at 2 us
    q.settle(0.0)
    q.advance(3.0)                     # one step across the fill: 2 us filling, then 1 us full
    assert q.level == 4.0 and q.admitted == pytest.approx(7.0) and q.drained == pytest.approx(3.0)
    released, horizon = q.settle(3.0)  # 3 B left at R = 1 B/us
    assert released == [] and horizon == pytest.approx(3.0)
    released, _ = q.settle(6.0)
    assert released == ["a"] and q.admitted == pytest.approx(10.0)
    q.advance(10.0)
    assert q.level == 0.0 and q.drained == pytest.approx(10.0) and q.idle_since == pytest.approx(10.0)
