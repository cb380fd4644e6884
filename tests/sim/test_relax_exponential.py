"""The exponentially relaxing capacity (``Platform.capacity_relax_exponential``, ``--model two-stage-gated3``; session 9,
cal8): closed forms against the fluid queue, exact on a tiny case and at random points (conservation: the relaxing
capacity test of test_platform_two_stage, parametrized over the law); the release of
producers whose demand the growing room reaches; every committed platform file unchanged; the fit reads the field."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given, settings

from xstage.errors import InputError
from xstage.paths import data_dir
from xstage.sim import model, model_two_stage
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.fluid import FluidQueue
from xstage.sim.fluid_ordered import OrderedFluidQueue
from xstage.sim.platform import Platform, load_platform
from xstage.sim.platform_fit import MODELS, capacity_law_of, check_model, fit_platform

from .test_platform_two_stage import _relaxing, relaxing_points


def _run_alone(q: FluidQueue, t: float = 0.0) -> float:
    """Settle ``q`` until nothing is pending; the time at which the last producer was released."""
    last = t
    while True:
        released, h = q.settle(t)
        if released:
            last = t
        if h == math.inf:
            return last
        t += h


# --- a tiny case, by hand ------------------------------------------------------------------------------

def test_tiny_burst_closed_form_and_fluid_queue_agree_exactly():
    """R = 1 B/us, Q = 4 B, floor 2 B, rho = 0.5 B/us (tau = 4 us); one producer of 10 B at 10 B/us from empty.
    It fills at t1 = 4/9 us with 50/9 B left; after that R s - 2 (1 - exp(-s/4)) gets in, so s solves
    s - 2 (1 - exp(-s/4)) = 50/9: s = 7.2272 us (bisection below), T = 7.6716 us, C(T) = 2.3283 B."""
    lo, hi = 0.0, 20.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid - 2 * (1 - math.exp(-mid / 4)) < 50 / 9 else (lo, mid)
    want = 4 / 9 + lo
    assert want == pytest.approx(7.6716, abs=1e-4)
    T = model_two_stage.relaxing_isolated_issue_time_us(1.0, 10.0, 1.0, 4.0, 2.0, 0.5, exponential=True)
    assert T == pytest.approx(want, rel=1e-12)
    q = FluidQueue(1.0, 4.0, relax_Bpus=0.5, floor_bytes=2.0, relax_exponential=True)
    q.add(0.0, 10.0, 10.0, "p")
    t = 0.0
    while True:
        released, h = q.settle(t)
        if released:
            break
        t += h
    assert t == pytest.approx(want, rel=1e-12)
    assert q.capacity == pytest.approx(2.0 + 2.0 * math.exp(-lo / 4), rel=1e-12)   # where it had fallen to
    assert q.capacity == pytest.approx(model_two_stage.relaxing_isolated_end_level_bytes(
        1.0, 10.0, 1.0, 4.0, 2.0, 0.5, exponential=True), rel=1e-12)
    assert q.level == q.capacity
    # the linear law with the same rho lets less in: its capacity falls faster (exp(-x) >= 1 - x)
    assert T < model_two_stage.relaxing_isolated_issue_time_us(1.0, 10.0, 1.0, 4.0, 2.0, 0.5)


def test_fill_time_is_the_root():
    for n, c, tau in ((1e6, 2e6, 100.0), (5e4, 1e3, 0.5), (1.0, 3e6, 1e4), (7e6, 0.0, 3.0)):
        s = model_two_stage.exponential_fill_time_us(n, 52.8e3, c, tau)
        assert 52.8e3 * s - c * -math.expm1(-s / tau) == pytest.approx(n, rel=1e-12)


def test_producers_are_let_go_where_the_room_reaches_their_demand():
    """A fast producer fills the queue; it finishes while held; the slow one left (R - rho < r < R) stays held until
    rho (C - floor) / (ceiling - floor) = R - r, i.e. C = floor + (R - r) tau, and is let go there."""
    R, Q, Qf, rho, r = 10.0, 100.0, 40.0, 4.0, 8.0
    tau = (Q - Qf) / rho
    q = FluidQueue(R, Q, relax_Bpus=rho, floor_bytes=Qf, relax_exponential=True)
    q.add(0.0, 150.0, 100.0, "fast")
    q.add(0.0, 400.0, r, "slow")
    t, seen, caps = 0.0, [], []
    while True:
        released, h = q.settle(t)
        seen += [(tok, t) for tok in released]
        caps.append(q.capacity)
        if h == math.inf:
            break
        t += min(h, 1.0)
    assert [tok for tok, _ in seen] == ["fast", "slow"]
    assert min(caps) == pytest.approx(Qf + (R - r) * tau, rel=1e-9)     # never below the release point
    assert q.level == 0.0 and q.capacity == Q
    assert q.drained == pytest.approx(550.0, rel=1e-12)


points = relaxing_points


def _platform(point):
    return _relaxing(point, capacity_relax_exponential=True)


@settings(max_examples=50, deadline=None)
@given(points)
def test_closed_forms_match_the_fluid_simulation(point):
    p, K, B, G, V, R, t0, Q, Qf, rho = _platform(point)
    iso = simulate_bursts(p, BurstConfig(K, B, G, 4, mode="isolated")).summary(p)
    assert iso["engine"] == "simpy"
    T = model_two_stage.relaxing_isolated_issue_time_us(t0, V, R, Q, Qf, rho, exponential=True)
    assert iso["T_iss_us"] == pytest.approx(T, rel=1e-9, abs=1e-9) and iso["model_T_iss_us"] == T
    assert T >= model.isolated_issue_time_us(t0, V, R, Q) * (1 - 1e-12)            # never faster than Eq. 7 at Q
    assert T <= model.isolated_issue_time_us(t0, V, R, Qf) * (1 + 1e-12) + 1e-12    # nor slower than at the floor
    assert T <= model_two_stage.relaxing_isolated_issue_time_us(t0, V, R, Q, Qf, rho) * (1 + 1e-12) + 1e-12
    end = model_two_stage.relaxing_isolated_end_level_bytes(t0, V, R, Q, Qf, rho, exponential=True)
    assume(end <= R * G)          # every burst starts empty: the periodic steady state is the isolated burst
    b = simulate_bursts(p, BurstConfig(K, B, G, 12, skip=6)).summary(p)
    assert b["T_iss_us"] == pytest.approx(T, rel=1e-9, abs=1e-9)
    assert b["model_T_iss_us"] == pytest.approx(T, rel=1e-12)


def test_replay_engines_agree_and_ordered_drain_refuses():
    from xstage.sim.replay import ReplayConfig, replay
    from xstage.sim.schedules import interleaved, moe_grid
    grid = moe_grid(np.array([256, 128, 384]), hidden=1024, intermediate=512)
    s = interleaved(grid, pairs=2, lead_rows=1)
    k = s.column("kind")
    ml, nbytes = np.where(k == 0, 3.0, 1.0), np.where(k == 1, 262144.0, 0.0)
    base = replace(load_platform("h200-pcie-host"), capacity_points=((1, 0.7 * 2**20),), sm_outstanding_bytes=16384.0,
                   capacity_relax_GBps=15.0)
    relax = replace(base, capacity_relax_exponential=True)
    fast, ref = (replay(s, ml, nbytes, relax, ReplayConfig(engine=e, producers=16)) for e in ("fast", "simpy"))
    assert fast.makespan_us == pytest.approx(ref.makespan_us, rel=1e-9)
    with pytest.raises(ValueError, match="ordered"):
        OrderedFluidQueue(50e3, 1e6, relax_Bpus=1e4, floor_bytes=5e5, relax_exponential=True)
    with pytest.raises(ValueError, match="relax_Bpus"):
        FluidQueue(50e3, 1e6, relax_exponential=True)


# --- the platform field ----------------------------------------------------------------------------------

def _plat(**kw):
    base = dict(name="t", sm_count=132, drain_rate_GBps=52.8, t_fixed_us=0.2, producer_issue_GBps=51.0,
                capacity_points=((1, 0.75 * 2**20),), sm_outstanding_bytes=18000.0, capacity_relax_GBps=20.0)
    return Platform(**{**base, **kw})


def test_field_round_trips_is_left_out_while_unset_and_is_checked():
    p = _plat(capacity_relax_exponential=True)
    d = json.loads(p.to_json())
    assert d["capacity_relax_exponential"] is True and Platform.from_dict(d) == p
    assert "capacity_relax_exponential" not in json.loads(_plat().to_json())
    assert p.queue_options(66) == {"relax_Bpus": 20e3, "floor_bytes": 0.75 * 2**20, "relax_exponential": True}
    assert _plat().queue_options(66) == {"relax_Bpus": 20e3, "floor_bytes": 0.75 * 2**20}
    with pytest.raises(InputError, match="capacity_relax_exponential"):
        _plat(capacity_relax_exponential="yes")
    with pytest.raises(InputError, match="needs capacity_relax_GBps"):
        _plat(capacity_relax_GBps=None, capacity_relax_exponential=True)
    free = replace(p, free_capacity_bound=False).free_running(8e6)     # free bursts: no relaxing capacity at all
    assert free.capacity_relax_GBps is None and free.capacity_relax_exponential is None


def test_every_committed_platform_file_reads_and_writes_back_unchanged():
    files = sorted(data_dir().rglob("platform*.json")) + sorted((data_dir().parent / "sim" / "platforms").glob("*.json"))
    assert len(files) > 10
    n = 0
    for f in files:
        d = json.loads(f.read_text())
        try:
            p = Platform.from_dict(d)
        except InputError:
            continue
        assert "capacity_relax_exponential" not in d
        assert p.capacity_relax_exponential is None and "relax_exponential" not in p.queue_options(p.sm_count)
        assert p.to_dict() == d, f
        n += 1
    assert n > 10


# --- the fit ----------------------------------------------------------------------------------------------

def test_models_are_only_extended_and_gated3_fits_the_exponential_law():
    assert capacity_law_of("two-stage-gated3") == "relaxing-gated-overlap-exp"
    assert {k: v for k, v in MODELS.items() if k not in ("two-stage-gated3", "two-stage-knee", "two-stage-knee2",
                                                         "two-stage-state", "two-stage-kneek",
                                                         "two-stage-gated2-span", "two-stage-gated2-cc",
                                                         "two-stage-gated2-span-cc", "two-stage-lockq")} == {
        "v1": "points", "two-stage": "shared+per_sm", "two-stage-relax": "relaxing",
        "two-stage-gated": "relaxing-gated", "two-stage-robust": "relaxing-robust",
        "two-stage-gated2": "relaxing-gated-overlap"}
    with pytest.raises(InputError, match="model"):
        check_model("two-stage-gated4")
    from xstage.records import load_records
    points, _ = load_records(data_dir() / "calibration-extra" / "h200-pcie-host-fresh5" / "points.parquet", "point")
    g3, fit = fit_platform(points, name="g3", target="host", sm_count=132, capacity_law="relaxing-gated-overlap-exp")
    g2, _ = fit_platform(points, name="g2", target="host", sm_count=132, capacity_law="relaxing-gated-overlap")
    assert g3.capacity_relax_exponential is True and g2.capacity_relax_exponential is None
    assert g3.skew_overlaps_ceiling is True and "exponentially" in g3.notes["capacity_points"]
    # everything before rho is gated2's; rho is chosen by the same model check, under the exponential law
    assert (g3.t_fixed_us, g3.drain_rate_GBps, g3.sm_outstanding_bytes) == (g2.t_fixed_us, g2.drain_rate_GBps,
                                                                              g2.sm_outstanding_bytes)
    from xstage.sim.fit_two_stage import check_loss
    rho = fit["relax"]["rho_Bpus"]
    assert check_loss(points, g3, rho) <= min(check_loss(points, g3, f * rho) for f in (0.8, 1.25)) + 1e-12
