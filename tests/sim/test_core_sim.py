"""The simulator against the model (Eq. 1, 3, 7), against a hand-worked case, and against the chunked queue."""

import itertools

import pytest
import simpy

from xstage.sim import model
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import load_platform
from xstage.sim.xqueue import FluidXStage

P = load_platform("paper-b200")


def test_hand_worked_isolated_burst(toy_platform):
    # K=2 producers x 8 B at 4 B/us each; R = 1 B/us; Q = 6 B. The queue fills at 6/7 us (net 7 B/us); the
    # remaining 16 - 48/7 bytes enter at R: issue ends at (V - Q)/R = 10 us; the queue empties at 16 us.
    r = simulate_bursts(toy_platform, BurstConfig(2, 8, 0.0, 2, mode="isolated", engine="simpy"))
    first = r.bursts[r.bursts["burst"] == 0]
    assert list(first["issue(us)"]) == pytest.approx([10.0, 10.0])
    occ = r.occupancy
    assert list(occ["time(us)"])[:4] == pytest.approx([0.0, 6 / 7, 10.0, 16.0])
    assert list(occ["queue(bytes)"])[:4] == pytest.approx([0.0, 6.0, 6.0, 0.0])
    assert r.bursts[r.bursts["burst"] == 1]["start(us)"].tolist() == pytest.approx([16.0, 16.0])


@pytest.mark.parametrize("engine", ["simpy", "exact"])
def test_isolated_gap_starts_once_the_queue_is_empty(toy_platform, engine):
    # The hand-worked burst above with G = 1 us: issue ends at 10, the queue empties at 16, the next starts at 17.
    r = simulate_bursts(toy_platform, BurstConfig(2, 8, 1.0, 3, mode="isolated", engine=engine))
    assert r.bursts[r.bursts["producer"] == 0]["start(us)"].tolist() == pytest.approx([0.0, 17.0, 34.0])
    s = r.summary(toy_platform)
    assert s["period_us"] == pytest.approx(17.0) and s["model_period_us"] == pytest.approx(17.0)
    assert s["drained_us"] == pytest.approx(34.0 + 16.0)


def test_exact_event_sequence_of_two_producers():
    # One producer alone, then a second joins while the first is still issuing.
    env = simpy.Environment()
    q = FluidXStage(env, drain_rate_Bpus=1.0, capacity_bytes=4.0)
    seen = []

    def producer(name, delay, nbytes, rate):
        yield env.timeout(delay)
        yield q.issue(nbytes, rate)
        seen.append((name, env.now))

    env.process(producer("a", 0.0, 6.0, 3.0))   # fills at 2 us (net 2 B/us), level 4
    env.process(producer("b", 1.0, 2.0, 1.0))   # joins at 1 us
    env.run()
    # t=1: a has put 3 B, level 2; both inject 4 B/us total, net 3 B/us -> full at 1+2/3.
    # Then R=1 B/us is shared 3:1; a has 6-3-2=1 B left at 0.75 B/us, b has 2-2/3 B left at 0.25 B/us.
    # a finishes at 1+2/3+4/3 = 3; b alone (1 B/us demand = R, queue stays full) has 4/3-1/3 = 1 B left: t=4.
    assert seen == [("a", pytest.approx(3.0)), ("b", pytest.approx(4.0))]
    assert q.level == pytest.approx(0.0) and q.admitted == pytest.approx(8.0)


def _within_capacity(K, B):
    """Eq. 3 is exact while one burst does not overrun Q by itself (the capacity bound of Eq. 10)."""
    return model.peak_outstanding_bytes(P.issue_time0_us(K, B), K * B, P.drain_rate_Bpus) <= P.capacity_bytes(K)


GRID = [(K, B, G) for K, B, G in itertools.product([16, 66, 132, 148], [8 * 1024, 16 * 1024, 32 * 1024],
                                                    [0.0, 1.0, 3.0, 6.0, 12.0]) if _within_capacity(K, B)]


@pytest.mark.parametrize("K,B,G", GRID)
def test_periodic_matches_eq1_and_eq3(K, B, G):
    volume, R = K * B, P.drain_rate_Bpus
    t0 = P.issue_time0_us(K, B)
    s = simulate_bursts(P, BurstConfig(K, B, G, 60, mode="periodic", engine="simpy")).summary(P)
    assert s["T_iss_us"] == pytest.approx(model.issue_time_us(G, t0, volume, R), rel=0.01)
    assert s["period_us"] == pytest.approx(model.period_us(G, t0, volume, R), rel=0.01)
    if G < model.recovery_gap_us(t0, volume, R):  # Eq. 1: drain-dominated period = V / R
        assert s["period_us"] == pytest.approx(volume / R, rel=0.01)


@pytest.mark.parametrize("K,B", [(16, 512 * 1024), (66, 128 * 1024), (148, 16 * 1024), (148, 33 * 1024),
                                 (148, 64 * 1024), (132, 96 * 1024)])
def test_isolated_matches_eq7(K, B):
    volume, R = K * B, P.drain_rate_Bpus
    t0 = P.issue_time0_us(K, B)
    s = simulate_bursts(P, BurstConfig(K, B, 1.0, 3, mode="isolated", engine="simpy")).summary(P)
    assert s["T_iss_us"] == pytest.approx(model.isolated_issue_time_us(t0, volume, R, P.capacity_bytes(K)), rel=0.01)


OVERRUN = [(K, B, G) for K, B, G in itertools.product([33, 132], [48 * 1024, 64 * 1024, 128 * 1024],
                                                       [0.0, 2.0, 6.0, 12.0, 40.0]) if not _within_capacity(K, B)]


@pytest.mark.parametrize("K,B,G", OVERRUN)
def test_overrunning_bursts_follow_eq3_with_eq7_floor(K, B, G):
    volume, R, Q = K * B, P.drain_rate_Bpus, P.capacity_bytes(K)
    t0 = P.issue_time0_us(K, B)
    s = simulate_bursts(P, BurstConfig(K, B, G, 40, mode="periodic", engine="simpy")).summary(P)
    assert s["T_iss_us"] == pytest.approx(model.issue_time_with_capacity_us(G, t0, volume, R, Q), rel=0.01)


def test_grid_covers_both_regimes():
    assert len(OVERRUN) >= 20
    assert any(G * P.drain_rate_Bpus >= P.capacity_bytes(K) for K, B, G in OVERRUN)  # the drained-start case
    assert len(GRID) >= 40
    drain = [g for K, B, g in GRID if g < model.recovery_gap_us(P.issue_time0_us(K, B), K * B, P.drain_rate_Bpus)]
    assert 10 < len(drain) < len(GRID)


def test_local_mode_is_gap_insensitive():
    a = simulate_bursts(P, BurstConfig(148, 32 * 1024, 0.0, 20, mode="local", engine="simpy")).summary(P)
    b = simulate_bursts(P, BurstConfig(148, 32 * 1024, 5.0, 20, mode="local", engine="simpy")).summary(P)
    assert a["T_iss_us"] == pytest.approx(0.76) and b["T_iss_us"] == pytest.approx(0.76)


def test_coupled_period_is_the_sum():
    K, B, G = 148, 32 * 1024, 3.0
    s = simulate_bursts(P, BurstConfig(K, B, G, 30, mode="coupled", engine="simpy")).summary(P)
    assert s["period_us"] == pytest.approx(model.coupled_period_us(G, K * B, P.drain_rate_Bpus), rel=0.01)
    x = simulate_bursts(P, BurstConfig(K, B, G, 30, mode="periodic", engine="simpy")).summary(P)
    assert x["period_us"] < s["period_us"]


@pytest.mark.parametrize("G", [0.0, 2.0, 8.0])
def test_chunked_queue_agrees_with_fluid(G):
    cfg = dict(producers=8, bytes_per_producer=64 * 1024, gap_us=G, bursts=12)
    fluid = simulate_bursts(P, BurstConfig(**cfg, capacity_bytes=256 * 1024, engine="simpy")).summary(P)
    chunk = simulate_bursts(P, BurstConfig(**cfg, capacity_bytes=256 * 1024, queue="chunked",
                                           chunk_bytes=2048)).summary(P)
    assert chunk["period_us"] == pytest.approx(fluid["period_us"], rel=0.05)
    assert chunk["T_iss_us"] == pytest.approx(fluid["T_iss_us"], rel=0.08, abs=0.05)


def test_producers_beyond_sms_rejected():
    from xstage.errors import InputError
    with pytest.raises(InputError, match=r"producers\(=149\)"):
        simulate_bursts(P, BurstConfig(149, 1024, 0.0, 2, engine="simpy"))
