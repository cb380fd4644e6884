"""The closed-form burst engine against the simpy reference; steady-state windows, skip, drained_us; bounds."""

import json

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from xstage.errors import InputError
from xstage.sim import model
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.bursts_exact import uniform_bursts, uniform_summaries
from xstage.sim.platform import Platform, load_platform

P = load_platform("paper-b200")

points = st.tuples(st.floats(1.0, 1000.0), st.floats(0.0, 1.0), st.floats(1.0, 200.0), st.floats(1e3, 1e7),
                   st.integers(1, 12), st.integers(64, 1 << 20), st.floats(0.0, 1.5),
                   st.sampled_from(["periodic", "isolated", "coupled", "local"]))


def _pair(point, n):
    R_GBps, t_fixed, issue_GBps, Q, K, B, gfrac, mode = point
    plat = Platform("rnd", 16, R_GBps, t_fixed, issue_GBps, ((K, Q),))
    t0, V, R = plat.issue_time0_us(K, B), K * B, plat.drain_rate_Bpus
    G = gfrac * max(model.recovery_gap_us(t0, V, R), Q / R)
    runs = {e: simulate_bursts(plat, BurstConfig(K, B, G, n, mode=mode, engine=e)) for e in ("exact", "simpy")}
    return plat, runs


@settings(max_examples=60, deadline=None)
@given(points, st.integers(2, 60))
def test_exact_engine_reproduces_simpy_burst_by_burst(point, n):
    plat, runs = _pair(point, n)
    a, b = runs["exact"].bursts, runs["simpy"].bursts
    assert len(a) == len(b) and (a["producer"].to_numpy() == b["producer"].to_numpy()).all()
    clock = 64 * np.spacing(float(b["start(us)"].max()) + 1.0)    # the simpy clock's resolution at the end
    for col in ("start(us)", "issue(us)", "period(us)"):
        assert np.allclose(a[col], b[col], rtol=1e-9, atol=clock, equal_nan=True), col
    sa, sb = runs["exact"].summary(plat), runs["simpy"].summary(plat)
    for key in ("T_iss_us", "period_us", "drained_us", "peak_queue_MiB"):
        assert sa[key] == pytest.approx(sb[key], rel=1e-9, abs=max(clock, 1e-12)), key
    assert sa["skip"] == sb["skip"] and sa["steady"] == sb["steady"] and sa["engine"] == "exact"


def test_auto_engine_and_lazy_records():
    r = simulate_bursts(P, BurstConfig(148, 32768, 2.0, 20000))
    assert r.engine == "exact" and r._frame is None
    s = r.summary(P)
    assert r._frame is None                      # a summary never builds the K x n rows
    assert s["T_iss_us"] == pytest.approx(s["model_T_iss_us"], rel=1e-12) and s["steady"]
    assert len(r.bursts) == 148 * 20000          # ...until they are asked for
    assert simulate_bursts(P, BurstConfig(8, 4096, 0.0, 4, queue="chunked")).engine == "simpy"


def test_steady_window_leaves_out_the_warmup():
    """Near G* the warm-up outlasts half a run: the median must not include it, and says so when it must."""
    K, B = 148, 32768
    big = Platform("b200-16MiB", 148, 717.0, 0.12, 51.2, ((148, 16 * 2**20),))   # paper-b200 with Q = 16 MiB
    t0, V, R, Q = big.issue_time0_us(K, B), K * B, big.drain_rate_Bpus, big.capacity_bytes(K)
    g = model.recovery_gap_us(t0, V, R) * (1 - 0.065)
    w = model.warmup_bursts(g, t0, V, R, Q)
    assert 30 < w < 60
    exact_t = model.issue_time_with_capacity_us(g, t0, V, R, Q)
    full = simulate_bursts(big, BurstConfig(K, B, g, w + 20, engine="simpy")).summary(big)
    assert full["skip"] == w and full["steady"] and full["T_iss_us"] == pytest.approx(exact_t, rel=1e-9)
    n = w + 6      # steady for its last 6 bursts: the old rule (median of the second half) is inside the warm-up
    half = simulate_bursts(big, BurstConfig(K, B, g, n, skip=n // 2, engine="simpy")).summary(big)
    assert not half["steady"] and half["T_iss_us"] < exact_t * (1 - 1e-4)   # what the old half-run rule reported
    short = simulate_bursts(big, BurstConfig(K, B, g, w // 2)).summary(big)
    assert not short["steady"] and short["bursts_needed"] == w + 2
    r = simulate_bursts(big, BurstConfig(K, B, g, w + 20, engine="simpy"))
    assert r.steady(big)["burst"].min() == w


def test_drained_us_is_first_issue_to_last_byte():
    # 4 bursts of V = 8 B at 8 B/us into R = 1 B/us, Q = 100: each burst leaves 7 B; G = 1 drains 1 B
    toy = Platform("toy", 1, 0.001, 0.0, 0.008, ((1, 100.0),))
    for engine in ("exact", "simpy"):
        r = simulate_bursts(toy, BurstConfig(1, 8, 1.0, 4, engine=engine))
        # starts 0, 2, 4, 6; 28 B admitted by 7 us, 7 drained by then... all 32 B drained at 32 us
        assert r.drained_us == pytest.approx(32.0), engine
        assert r.bursts["start(us)"].tolist() == pytest.approx([0.0, 2.0, 4.0, 6.0])


def test_uniform_summaries_vectorised_over_configurations():
    rng = np.random.default_rng(7)
    m, n = 200, 500
    t0, V = rng.uniform(0.1, 2, m), rng.uniform(1e5, 1e7, m)
    R, Q, G = rng.uniform(100, 1000, m), rng.uniform(1e5, 5e6, m), rng.uniform(0, 5e3, m)
    skip = np.array([min(model.warmup_bursts(*x), n - 2) for x in zip(G, t0, V, R, Q)])
    out = uniform_summaries("periodic", n, skip, t0, V, R, Q, G)
    for i in rng.choice(m, 12, replace=False):
        d = uniform_bursts("periodic", n, t0[i], V[i], R[i], Q[i], G[i])
        assert out["T_iss_us"][i] == pytest.approx(np.median(d["issue"][skip[i]:]), rel=1e-12)
        assert out["period_us"][i] == pytest.approx(np.median(d["period"][skip[i]:-1]), rel=1e-12)
        assert out["drained_us"][i] == pytest.approx(d["drained_us"], rel=1e-12)
        if skip[i] < n - 2:
            assert out["T_iss_us"][i] == pytest.approx(
                model.issue_time_with_capacity_us(G[i], t0[i], V[i], R[i], Q[i]), rel=1e-12)


def test_simpy_engine_has_a_size_bound():
    with pytest.raises(InputError, match="exact"):
        simulate_bursts(P, BurstConfig(148, 32768, 0.0, 40000, engine="simpy"))
    with pytest.raises(InputError, match=r"skip\(=9\)"):
        BurstConfig(1, 1024, 0.0, 10, skip=9)
    with pytest.raises(InputError, match=r"engine\(='warp'\)"):
        BurstConfig(1, 1024, 0.0, 10, engine="warp")


def test_cli_engine_and_skip(capsys):
    from xstage.cli import main
    argv = ["sim", "bursts", "-p", "paper-b200", "-K", "132", "-B", "32KiB", "-G", "2", "-n", "50", "--json"]
    outs = {}
    for engine in ("exact", "simpy"):
        assert main([*argv, "--engine", engine]) == 0
        outs[engine] = json.loads(capsys.readouterr().out)
    assert outs["exact"]["engine"] == "exact" and outs["simpy"]["engine"] == "simpy"
    assert outs["exact"]["T_iss_us"] == pytest.approx(outs["simpy"]["T_iss_us"], rel=1e-9)
    assert main([*argv, "--skip", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["skip"] == 10
    for flag, value, field in (("--skip", "x", "skip(='x')"), ("--skip", "-1", "skip(='-1')"),
                               ("--skip", "49", "skip(=49)"), ("--engine", "gpu", "engine(='gpu')")):
        assert main([*argv, flag, value]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and field in err


def test_drained_is_recorded_when_rounding_empties_the_queue():
    """Found by the burst-by-burst property: the queue emptied inside a step that rounding ended a hair short
    of the empty edge (the level clamped to 0 there), so the instant the last byte drained was never recorded
    and simpy reported drained_us = 0. Both engines must give 2V/R."""
    plat = Platform("rnd", 16, 874.125, 0.0, 90.0, ((12, 1000.0),))
    K, B = 12, 113
    for engine in ("simpy", "exact"):
        s = simulate_bursts(plat, BurstConfig(K, B, 0.0, 2, mode="periodic", engine=engine)).summary(plat)
        assert s["drained_us"] == pytest.approx(2 * K * B / plat.drain_rate_Bpus, rel=1e-12), engine


@pytest.mark.parametrize("mode", ["periodic", "isolated", "lockstep", "coupled"])
def test_a_burst_inside_the_store_buffer_with_no_fixed_time_issues_at_once_in_both_engines(mode):
    # T_iss0 = 0 (a fitted free-running law can give it): simpy issues it in MIN_ISSUE_US instead of dividing by 0
    from xstage.sim.bursts import MIN_ISSUE_US

    plat = Platform("zero", 16, 50.0, 0.0, 10.0, ((4, 1e6),), store_buffer_bytes=8192.0)
    assert plat.issue_time0_us(4, 4096) == 0.0
    cfg = dict(gap_us=1.0, bursts=6, mode=mode, barrier_us=0.2 if mode == "lockstep" else None)
    exact = simulate_bursts(plat, BurstConfig(4, 4096, engine="exact", **cfg))
    simpy_ = simulate_bursts(plat, BurstConfig(4, 4096, engine="simpy", **cfg))
    if mode in ("periodic", "isolated"):   # (lockstep and coupled bursts end with their drain)
        assert np.all(simpy_.bursts["issue(us)"].to_numpy() <= MIN_ISSUE_US * 1.0001)
    for col in ("start(us)", "issue(us)"):
        assert np.allclose(exact.bursts[col], simpy_.bursts[col], atol=10 * 6 * MIN_ISSUE_US), col
    assert exact.drained_us == pytest.approx(simpy_.drained_us, abs=10 * 6 * MIN_ISSUE_US)
    assert exact.drained_us >= 4 * 4096 / plat.drain_rate_Bpus   # the drain still takes V / R
