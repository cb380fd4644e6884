"""Platform schema version 2 (the two-stage X-Stage): version-1 files unchanged, the new fields read by the
closed forms, the simulators, the replay and the fit, and the closed forms exact at random points."""

import json
import math
import sys
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from xstage.errors import InputError
from xstage.records.platform import save_platform
from xstage.sim import model, model_two_stage
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import Platform, bundled_platforms, load_platform
from xstage.sim.replay import ReplayConfig, replay
from xstage.sim.schedules import interleaved, moe_grid

GOLDEN = Path(__file__).parent / "golden"


def _same(a, b) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


def test_every_bundled_platform_gives_mains_figures_exactly():
    """v1_figures.json was written by main's code (before schema 2) with golden/make_v1_figures.py."""
    sys.path.insert(0, str(GOLDEN))
    try:
        from make_v1_figures import figures
    finally:
        sys.path.remove(str(GOLDEN))
    golden = json.loads((GOLDEN / "v1_figures.json").read_text())
    assert sorted(golden) == bundled_platforms()
    for name in bundled_platforms():
        now = figures(name)
        for key in ("hash", "model", "bursts", "replay"):
            assert _same(now[key], golden[name][key]), (name, key)


@pytest.mark.parametrize("name", bundled_platforms())
def test_version_1_files_load_and_write_back_unchanged(name, tmp_path):
    text = (resources.files("xstage.sim") / "platforms" / f"{name}.json").read_text()
    p = load_platform(name)
    assert p.schema_version == 1 and not p.two_stage
    assert p.to_dict() == json.loads(text)
    q = Platform.load(save_platform(p, tmp_path / "p.json"))
    assert q == p and q.content_hash == p.content_hash


def _two(**kw):
    base = load_platform("h200-pcie-host")
    return replace(base, **kw)


def test_two_stage_fields_set_issue_time_and_capacity():
    base = load_platform("h200-pcie-host")
    p = _two(sm_store_GBps=2.0, sm_outstanding_bytes=16384.0, capacity_points=((1, 1e6),))
    assert p.schema_version == 2
    K, B = 64, 32768
    assert p.issue_time0_us(K, B) == pytest.approx(max(base.issue_time0_us(K, B), B / 2e3))
    assert p.issue_time0_us(K, 64) == base.issue_time0_us(K, 64)          # the stage binds only above r_sm
    assert p.capacity_bytes(K) == pytest.approx(1e6 + K * 16384.0)
    assert p.shared_capacity_bytes(K) == 1e6
    assert p.producer_rate_Bpus(K, B) == pytest.approx(2e3)


def test_two_stage_round_trip_and_bad_fields(tmp_path):
    p = _two(sm_store_GBps=1.065, sm_outstanding_bytes=0.0)
    d = p.to_dict()
    assert d["schema_version"] == 2 and d["sm_store_GBps"] == 1.065 and d["sm_outstanding_bytes"] == 0.0
    q = Platform.load(save_platform(p, tmp_path / "v2.json"))
    assert q == p and q.content_hash == p.content_hash
    with pytest.raises(InputError, match="already exists"):
        save_platform(p, tmp_path / "v2.json")
    with pytest.raises(InputError, match="not platform fields"):
        Platform.from_dict({**d, "schema_version": 1})
    for field, value in (("sm_store_GBps", 0), ("sm_store_GBps", "fast"), ("sm_outstanding_bytes", -1.0),
                         ("sm_outstanding_bytes", True)):
        with pytest.raises(InputError) as err:
            Platform.from_dict({**d, field: value})
        assert field in str(err.value) and repr(value) in str(err.value)
    for version in (0, 3, True, "2"):
        with pytest.raises(InputError, match="schema_version"):
            Platform.from_dict({**d, "schema_version": version})


# --- exactness at random points ---------------------------------------------------------------------

def _tandem_issue_times(K, B, G, n, rate, R, q_shared, q_sm, steps=4000):
    """Independent check: the two stages stepped in time for K symmetric producers (not the fluid queue).
    Each step drains the shared buffer, moves stage bytes into it, then issues into the shared buffer first
    and the per-SM stages after. Returns each burst's issue time."""
    t0 = B / rate
    dt = max(t0, K * B / R) / steps
    shared = stage = 0.0
    t, out = 0.0, []
    for _ in range(n):
        left, start = K * B, t
        while left > 1e-9 * K * B:
            shared -= min(shared, R * dt)
            move = min(stage, q_shared - shared)
            stage, shared = stage - move, shared + move
            x = min(K * rate * dt, left, (q_shared - shared) + (K * q_sm - stage))
            into = min(x, q_shared - shared)
            shared, stage, left = shared + into, stage + x - into, left - x
            t += dt
        out.append(t - start)
        for _ in range(int(round(G / dt))):
            shared -= min(shared, R * dt)
            move = min(stage, q_shared - shared)
            stage, shared = stage - move, shared + move
            t += dt
    return np.array(out)


points = st.tuples(st.floats(5.0, 500.0), st.floats(0.0, 0.5), st.floats(10.0, 200.0), st.floats(0.2, 50.0),
                   st.floats(1e4, 4e6), st.floats(0.0, 65536.0), st.integers(1, 32), st.integers(4096, 1 << 19),
                   st.floats(0.0, 1.0))


def _platform(point):
    R, t_fixed, P, r_sm, q_sh, q_sm, K, B, gfrac = point
    p = Platform("two", 64, R, t_fixed, P, ((1, q_sh),), sm_store_GBps=r_sm, sm_outstanding_bytes=q_sm)
    V, Rb, t0, Q = K * B, p.drain_rate_Bpus, p.issue_time0_us(K, B), p.capacity_bytes(K)
    G = gfrac * 2.0 * max(model.recovery_gap_us(t0, V, Rb), Q / Rb)
    return p, K, B, G, V, Rb, t0, Q


@settings(max_examples=40, deadline=None)
@given(points)
def test_two_stage_closed_forms_match_simpy_at_random_points(point):
    p, K, B, G, V, R, t0, Q = _platform(point)
    assert t0 >= B / (p.sm_store_GBps * 1e3) and Q == pytest.approx(p.shared_capacity_bytes(K) + K * p.sm_outstanding_bytes)
    w = model.warmup_bursts(G, t0, V, R, Q)
    assume(w < 200)
    for mode, t_iss, period in (
            ("periodic", model.issue_time_with_capacity_us(G, t0, V, R, Q), model.periodic_period_us(G, t0, V, R, Q)),
            ("isolated", model.isolated_issue_time_us(t0, V, R, Q), model.isolated_period_us(G, t0, V, R)),
            ("coupled", model.coupled_issue_time_us(t0, V, R), model.coupled_period_us(G, V, R, t0))):
        s = simulate_bursts(p, BurstConfig(K, B, G, w + 4, mode=mode, engine="simpy")).summary(p)
        assert s["T_iss_us"] == pytest.approx(t_iss, rel=1e-9, abs=1e-9)
        assert s["period_us"] == pytest.approx(period, rel=1e-9, abs=1e-9)
        assert s["model_T_iss_us"] == pytest.approx(t_iss, rel=1e-12)
        e = simulate_bursts(p, BurstConfig(K, B, G, w + 4, mode=mode, engine="exact")).summary(p)
        assert e["T_iss_us"] == pytest.approx(s["T_iss_us"], rel=1e-9, abs=1e-9)


@settings(max_examples=25, deadline=None)
@given(points)
def test_per_sm_outstanding_limit_is_additive_for_symmetric_producers(point):
    """A stepped tandem of per-SM stages (q_sm each) and a shared buffer agrees with the one fluid queue of
    capacity Q_shared + K q_sm (the schema's claim), to the stepping's resolution."""
    p, K, B, G, V, R, t0, Q = _platform(point)
    p = replace(p, sm_store_GBps=None, t_fixed_us=0.0)
    t0 = p.issue_time0_us(K, B)
    w = model.warmup_bursts(G, t0, V, R, Q)
    assume(w < 40)
    steps = 4000
    got = _tandem_issue_times(K, B, G, w + 3, B / t0, R, p.shared_capacity_bytes(K), p.sm_outstanding_bytes, steps)
    want = model.issue_time_with_capacity_us(G, t0, V, R, Q)
    assert got[-1] == pytest.approx(want, rel=0.01, abs=(w + 3) * 4 * max(t0, V / R) / steps)
    one = model.issue_time_with_capacity_us(G, t0, V, R, p.shared_capacity_bytes(K))   # the shared buffer alone
    if one > want * 1.1:
        assert got[-1] < one


def test_replay_reads_the_per_sm_stage():
    grid = moe_grid(np.array([256, 128]), hidden=1024, intermediate=512)
    s = interleaved(grid, pairs=2, lead_rows=1)
    k = s.column("kind")
    ml, nbytes = np.where(k == 0, 3.0, 2.0), np.where(k == 1, 32768.0, 0.0)
    base = load_platform("h200-pcie-host")
    slow = replace(base, sm_store_GBps=1.0, capacity_points=((1, 1e6),))
    for engine in ("fast", "simpy"):
        cfg = ReplayConfig(engine=engine, producers=8, remote_epilogue_us=0.0)
        r = replay(s, ml, nbytes, slow, cfg)
        assert np.all(r.spans_us() >= 32768 / 1e3 * (1 - 1e-9))          # B / r_sm at least
        assert r.makespan_us > replay(s, ml, nbytes, base, cfg).makespan_us
    fast, ref = (replay(s, ml, nbytes, slow, ReplayConfig(engine=e, producers=8)) for e in ("fast", "simpy"))
    assert fast.makespan_us == pytest.approx(ref.makespan_us, rel=1e-9)


# --- the relaxing capacity ---------------------------------------------------------------------------

relaxing_points = st.tuples(st.floats(5.0, 500.0), st.floats(0.0, 0.5), st.floats(10.0, 200.0),
                            st.floats(1e4, 2e6), st.floats(512.0, 65536.0), st.floats(0.02, 0.9),
                            st.integers(1, 32), st.integers(4096, 1 << 19), st.floats(0.0, 1.0))


def _relaxing(point, **platform_kw):
    """A relaxing platform and one burst configuration from a ``relaxing_points`` draw (``platform_kw``: further
    Platform fields, e.g. the exponential law's)."""
    R, t_fixed, P, q_sh, q_sm, rho_frac, K, B, gfrac = point
    p = Platform("relax", 64, R, t_fixed, P, ((1, q_sh),), sm_outstanding_bytes=q_sm,
                 capacity_relax_GBps=rho_frac * R, **platform_kw)
    V, Rb, t0, Q = K * B, p.drain_rate_Bpus, p.issue_time0_us(K, B), p.capacity_bytes(K)
    G = gfrac * 2.0 * max(V / Rb, Q / Rb)
    return p, K, B, G, V, Rb, t0, Q, p.shared_capacity_bytes(K), p.capacity_relax_GBps * 1e3


@settings(max_examples=50, deadline=None)
@given(relaxing_points)
def test_relaxing_capacity_closed_forms_match_simpy(point):
    p, K, B, G, V, R, t0, Q, Qf, rho = _relaxing(point)
    iso = simulate_bursts(p, BurstConfig(K, B, G, 4, mode="isolated")).summary(p)
    assert iso["engine"] == "simpy"
    T = model_two_stage.relaxing_isolated_issue_time_us(t0, V, R, Q, Qf, rho)
    assert iso["T_iss_us"] == pytest.approx(T, rel=1e-9, abs=1e-9) and iso["model_T_iss_us"] == T
    assert T >= model.isolated_issue_time_us(t0, V, R, Q) * (1 - 1e-12)            # never faster than Eq. 7 at Q
    assert T <= model.isolated_issue_time_us(t0, V, R, Qf) * (1 + 1e-12) + 1e-12    # nor slower than at the floor
    T_per = model_two_stage.relaxing_periodic_issue_time_us(G, t0, V, R, Q, Qf, rho)
    assume(not math.isnan(T_per))
    ts = (Q - Qf) / rho           # enough bursts for the queue (at the floor) and the capacity to settle
    n = (model.warmup_bursts(G, t0, V, R, Q) + model.warmup_bursts(G, t0, V, R, Qf) + 8
         + 4 * math.ceil(ts / max(T_per, 1e-9)))
    assume(n <= 600)
    b = simulate_bursts(p, BurstConfig(K, B, G, n, skip=n - 3)).summary(p)
    assert b["T_iss_us"] == pytest.approx(T_per, rel=1e-6, abs=1e-9)
    assert b["model_T_iss_us"] == pytest.approx(T_per, rel=1e-12)


@pytest.mark.parametrize("exponential", [False, True])    # True: Platform.capacity_relax_exponential
@settings(max_examples=20, deadline=None)
@given(point=relaxing_points)
def test_relaxing_capacity_conserves_bytes_and_stays_between_floor_and_ceiling(point, exponential):
    from xstage.sim.fluid import FluidQueue
    p, K, B, G, V, R, t0, Q, Qf, rho = _relaxing(point, capacity_relax_exponential=exponential or None)
    q = FluidQueue(R, Q, relax_Bpus=rho, floor_bytes=Qf, relax_exponential=exponential)
    rng = np.random.default_rng(int(K * 7919 + B))
    t, total = 0.0, 0.0
    for _ in range(40):
        q.add(t, B, B / t0 * (0.5 + rng.random()), None)
        total += B
        _, h = q.settle(t)
        t += min(h, rng.random() * 2 * t0) if h < math.inf else rng.random() * t0
        q.settle(t)
        assert Qf * (1 - 1e-12) <= q.capacity <= Q * (1 + 1e-12)
        assert q.level <= q.capacity * (1 + 1e-9) + 1e-6
        assert abs(q.admitted - q.drained - q.level) <= 1e-9 * total + 1e-6
    while True:
        _, h = q.settle(t)
        if h == math.inf:
            break
        t += h
    assert q.level == 0.0 and q.capacity == Q
    assert q.drained == pytest.approx(total, rel=1e-9)


def test_relaxing_capacity_in_the_replay_and_the_fit():
    grid = moe_grid(np.array([256, 128, 384]), hidden=1024, intermediate=512)
    s = interleaved(grid, pairs=2, lead_rows=1)
    k = s.column("kind")
    ml, nbytes = np.where(k == 0, 3.0, 1.0), np.where(k == 1, 262144.0, 0.0)
    base = replace(load_platform("h200-pcie-host"), capacity_points=((1, 0.7 * 2**20),), sm_outstanding_bytes=16384.0)
    relax = replace(base, capacity_relax_GBps=15.0)
    fast, ref = (replay(s, ml, nbytes, relax, ReplayConfig(engine=e, producers=16)) for e in ("fast", "simpy"))
    assert fast.makespan_us == pytest.approx(ref.makespan_us, rel=1e-9)
    assert fast.makespan_us > replay(s, ml, nbytes, base, ReplayConfig(producers=16)).makespan_us
    with pytest.raises(InputError, match="relaxing"):
        simulate_bursts(relax, BurstConfig(16, 4096, 0.0, 4, engine="exact"))
    for field, value in (("capacity_relax_GBps", 60.0), ("capacity_relax_GBps", -1.0)):
        with pytest.raises(InputError, match=field):
            replace(relax, **{field: value})
    with pytest.raises(InputError, match="needs sm_outstanding_bytes"):
        replace(relax, sm_outstanding_bytes=None)
