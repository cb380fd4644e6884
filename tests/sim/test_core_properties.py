"""Property tests: occupancy bounds, flow conservation, long-run period >= V/R, determinism."""

import numpy as np
from hypothesis import given, settings, strategies as st

from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import Platform

platforms = st.builds(
    lambda R, t0, rate, q: Platform("h", 132, R, t0, rate, ((132, q),)),
    st.floats(1.0, 1000.0), st.floats(0.0, 2.0), st.floats(1.0, 100.0), st.floats(4096.0, 8 * 2**20))
configs = st.builds(
    lambda K, B, G, mode: BurstConfig(K, B, G, 12, mode=mode, engine="simpy"),
    st.integers(1, 132), st.integers(16, 256 * 1024), st.floats(0.0, 20.0),
    st.sampled_from(["periodic", "isolated", "coupled"]))


@settings(max_examples=40, deadline=None)
@given(platforms, configs)
def test_occupancy_bounds_conservation_and_period(platform, cfg):
    r = simulate_bursts(platform, cfg)
    occ = r.occupancy
    Q = platform.capacity_bytes(cfg.producers)
    assert (occ["queue(bytes)"] >= -1e-9 * Q).all()
    assert (occ["queue(bytes)"] <= Q * (1 + 1e-9)).all()
    balance = occ["issued(bytes)"] - occ["drained(bytes)"] - occ["queue(bytes)"]
    assert np.allclose(balance, 0.0, atol=1e-6 * max(1.0, occ["issued(bytes)"].max()))
    assert occ["issued(bytes)"].iloc[-1] == np.float64(occ["drained(bytes)"].iloc[-1]) or \
        abs(occ["issued(bytes)"].iloc[-1] - cfg.producers * cfg.bytes_per_producer * cfg.bursts) < 1e-6 * \
        cfg.producers * cfg.bytes_per_producer * cfg.bursts
    # Period >= V/R in the long run: by the time every producer has started burst b, b*V bytes were accepted,
    # and at most Q of them can still be outstanding, so that instant is >= (b*V - Q) / R.
    volume = cfg.producers * cfg.bytes_per_producer
    last_start = r.bursts.groupby("burst")["start(us)"].max()
    bound = (last_start.index.to_numpy() * volume - Q) / platform.drain_rate_Bpus
    assert (last_start.to_numpy() >= bound - 1e-9 * (1 + np.abs(bound))).all()


@settings(max_examples=15, deadline=None)
@given(platforms, configs)
def test_same_inputs_same_output(platform, cfg):
    a = simulate_bursts(platform, cfg)
    b = simulate_bursts(platform, cfg)
    assert a.bursts.equals(b.bursts)
    assert a.occupancy.equals(b.occupancy)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 50.0), st.floats(1.0, 5000.0), st.floats(0.5, 50.0)), min_size=1,
                max_size=12), st.floats(0.5, 20.0), st.floats(100.0, 20000.0))
def test_queue_with_arbitrary_arrivals(run_on_queue, arrivals, R, Q):
    done = []

    def producer(env, q, delay, nbytes, rate):
        yield env.timeout(delay)
        t = env.now
        yield q.issue(nbytes, rate)
        done.append((env.now - t, nbytes / rate))

    _, q = run_on_queue(R, Q, lambda env, q: (producer(env, q, *a) for a in arrivals))
    total = sum(a[1] for a in arrivals)
    assert len(done) == len(arrivals)
    assert all(took >= floor * (1 - 1e-9) for took, floor in done)  # never faster than unconstrained
    assert abs(q.admitted - total) < 1e-6 * total and q.level < 1e-6 * total
    t, lvl, adm, drn = (np.array(x) for x in q.log)
    assert (lvl <= Q * (1 + 1e-9)).all() and (lvl >= 0).all()
    assert np.allclose(adm - drn, lvl, atol=1e-6 * total)
