"""Fused-kernel replay: hand-worked timelines, engine agreement, dependency and slot invariants."""

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.records import COLUMNS
from xstage.sim.platform import Platform
from xstage.sim.replay import ReplayConfig, replay
from xstage.sim.schedule_fa import fa_qloop
from xstage.sim.schedules import KIND_L1, KIND_L2, MoeGrid, expert_wave, interleaved, moe_grid


def toy(sms=8):
    """R = 1 B/us, issue 4 B/us per producer, no fixed cost, Q(K) = 3 K bytes."""
    return Platform(name="toy", sm_count=sms, drain_rate_GBps=0.001, t_fixed_us=0.0, producer_issue_GBps=0.004,
                    capacity_points=((2, 6.0),))


def test_two_sm_interleaved_by_hand():
    # One row, L1 tiles n0/n1 on SMs 0/1 then L2 tiles n0/n1. L1 mainloop 2, L1 epilogue 0.5, L2 mainloop 1.
    s = interleaved(MoeGrid((1,), 1, 1), pairs=1, lead_rows=1)
    k = s.column("kind")
    ml = np.where(k == KIND_L1, 2.0, 1.0)
    nbytes = np.where(k == KIND_L2, 4.0, 0.0)
    cfg = ReplayConfig(local_epilogue_us=0.5, remote_epilogue_us=0.0)
    r = replay(s, ml, nbytes, toy(), cfg)
    a = r.arrays
    l2 = k == KIND_L2
    # L2 mainloops wait on l2_full until both L1 epilogues end at 2.5, run to 3.5.
    assert np.allclose(a["ml_start"][l2], 2.5) and np.allclose(a["dep_wait"][l2], 0.5)
    # Both issue 4 B at 4 B/us: the queue fills (6 B) at 3.5 + 6/7; the rest enters at R = 1 B/us: end 5.5.
    assert np.allclose(a["epi_end"][l2], 5.5)
    assert r.makespan_us == pytest.approx(5.5)
    assert r.drain_end_us == pytest.approx(11.5)          # 6 B left drain at 1 B/us
    assert r.peak_queue_bytes == pytest.approx(6.0)
    # Completion-coupled: each epilogue holds until all 8 B drained (3.5 + 8), plus latency.
    rc = replay(s, ml, nbytes, toy(), ReplayConfig(local_epilogue_us=0.5, remote_epilogue_us=0.0, coupled=True,
                                                   completion_latency_us=0.25))
    assert rc.makespan_us == pytest.approx(11.75)


def fa_like(n, sms=1):
    return fa_qloop(heads=1, seq_len=128 * n, num_sms=sms)


@pytest.mark.parametrize("slots,stalls,ends", [
    # double-buffered: tile 2 reuses tile 0's slot, free at 2; epilogues queue behind the full X-Stage
    (2, [0, 0, 0], [2.0, 6.0, 10.0]),
    # in series: mainloop 1 waits 2->... for epilogue 0 (ends 2), mainloop 2 waits 3 -> 6 for epilogue 1
    (1, [0, 1, 3], [2.0, 6.0, 10.0]),
    (0, [0, 1, 3], [2.0, 6.0, 10.0]),
])
def test_staging_slots_by_hand(slots, stalls, ends):
    # One SM, three tiles: mainloop 1 us, 4 B each at 4 B/us into Q(1) = 3 B drained at 1 B/us.
    s = fa_like(3)
    r = replay(s, np.ones(3), np.full(3, 4.0), toy(), ReplayConfig(staging_slots=slots, remote_epilogue_us=0.0))
    assert np.allclose(r.arrays["stall"], stalls)
    assert np.allclose(r.arrays["epi_end"], ends)


def test_cover_window():
    # In series with a 0.5 us cover: the next mainloop runs 0.5 us beside the epilogue, then waits for it.
    s = fa_like(2)
    r = replay(s, np.full(2, 2.0), np.full(2, 4.0), toy(), ReplayConfig(staging_slots=0, cover_us=0.5,
                                                                         remote_epilogue_us=0.0))
    a = r.arrays
    # tile 0: mainloop 0-2, issue 2-3 (4 B at 4 B/us; queue ends at 3 B = Q, no stall)
    assert a["epi_end"][0] == pytest.approx(3.0)
    # tile 1: starts at 2, covered 0.5, blocked until 3, then 1.5 more: ends 4.5; stall 0.5
    assert a["ml_end"][1] == pytest.approx(4.5) and a["stall"][1] == pytest.approx(0.5)


@pytest.mark.parametrize("engine", ["fast", "simpy"])
def test_cover_window_is_bounded_by_the_mainloop(engine):
    # Cover 2 us, mainloops 0.5 us: the cover can hide no more than the mainloop itself. One SM, in series.
    # tile 0: mainloop 0-0.5; issue 8 B at 4 B/us into Q = 3 B drained at 1 B/us: full at 1.5, ends 5.5.
    # tile 1: starts at 0.5 beside the epilogue, runs its whole 0.5 us covered, waits for the slot until 5.5
    # and ends there (stall 4.5); an unbounded cover would credit 2 us and end it at 4.0, before its slot.
    s = fa_like(2)
    r = replay(s, np.full(2, 0.5), np.full(2, 8.0), toy(), ReplayConfig(staging_slots=0, cover_us=2.0,
                                                                         remote_epilogue_us=0.0, engine=engine))
    a = r.arrays
    assert a["epi_end"][0] == pytest.approx(5.5)
    assert a["ml_start"][1] == pytest.approx(0.5) and a["ml_end"][1] == pytest.approx(5.5)
    assert a["stall"][1] == pytest.approx(4.5)
    assert a["epi_start"][1] == pytest.approx(5.5)


def random_case(seed):
    rng = np.random.default_rng(seed)
    g = moe_grid(rng.integers(0, 700, size=5), hidden=1024, intermediate=512, block_m=128, block_n=128)
    s = interleaved(g, 4, int(rng.integers(1, 4))) if seed % 2 else expert_wave(g, 4)
    k = s.column("kind")
    ml = np.where(k == KIND_L1, rng.uniform(1, 3), rng.uniform(0.5, 2)) * rng.uniform(0.9, 1.1, size=len(k))
    nbytes = np.where(k == KIND_L2, 32768.0, 0.0)
    return s, ml, nbytes


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("coupled", [False, True])
def test_fast_engine_matches_simpy(seed, coupled):
    plat = Platform(name="p", sm_count=8, drain_rate_GBps=50.0, t_fixed_us=0.1, producer_issue_GBps=40.0,
                    capacity_points=((8, 200_000.0),))
    s, ml, nbytes = random_case(seed)
    out = {}
    for engine in ("fast", "simpy"):
        cfg = ReplayConfig(coupled=coupled, completion_latency_us=0.3, staging_slots=1 + seed % 2, engine=engine)
        out[engine] = replay(s, ml, nbytes, plat, cfg)
    for key in ("ml_start", "ml_end", "epi_start", "epi_end", "stall", "dep_wait"):
        assert np.allclose(out["fast"].arrays[key], out["simpy"].arrays[key], atol=1e-7), key
    assert out["fast"].peak_queue_bytes == pytest.approx(out["simpy"].peak_queue_bytes)
    assert out["fast"].drain_end_us == pytest.approx(out["simpy"].drain_end_us)


def test_cover_fast_matches_simpy():
    s = fa_qloop(heads=3, seq_len=1024, num_sms=4)
    ml = np.linspace(1.0, 2.0, len(s.tiles))
    plat = Platform(name="p", sm_count=4, drain_rate_GBps=10.0, t_fixed_us=0.1, producer_issue_GBps=40.0,
                    capacity_points=((4, 50_000.0),))
    res = [replay(s, ml, np.full(len(ml), 32768.0), plat, ReplayConfig(staging_slots=0, cover_us=0.4, engine=e))
           for e in ("fast", "simpy")]
    assert np.allclose(res[0].arrays["epi_end"], res[1].arrays["epi_end"])
    assert np.allclose(res[0].arrays["stall"], res[1].arrays["stall"])


@pytest.mark.parametrize("seed", [4, 5])
def test_invariants(seed):
    plat = Platform(name="p", sm_count=8, drain_rate_GBps=20.0, t_fixed_us=0.1, producer_issue_GBps=40.0,
                    capacity_points=((8, 100_000.0),))
    s, ml, nbytes = random_case(seed)
    a = replay(s, ml, nbytes, plat, ReplayConfig()).arrays
    k, row, sm = a["kind"], a["row"], a["sm"]
    # an L2 mainloop never starts before every L1 epilogue of its row ended (on any SM)
    l1_done = np.zeros(row.max() + 1)
    np.maximum.at(l1_done, row[k == KIND_L1], a["epi_end"][k == KIND_L1])
    assert np.all(a["ml_start"][k == KIND_L2] >= l1_done[row[k == KIND_L2]] - 1e-9)
    # per SM: mainloops in order and disjoint, epilogues in order, each after its mainloop
    for s_ in range(s.num_sms):
        i = np.flatnonzero(sm == s_)
        assert np.all(a["ml_start"][i][1:] >= a["ml_end"][i][:-1] - 1e-9)
        assert np.all(a["epi_start"][i][1:] >= a["epi_end"][i][:-1] - 1e-9)
        assert np.all(a["epi_start"][i] >= a["ml_end"][i] - 1e-9)
        # two slots: tile j starts only after tile j-2's epilogue
        assert np.all(a["ml_start"][i][2:] >= a["epi_end"][i][:-2] - 1e-9)
    assert np.allclose(a["ml_end"] - a["ml_start"], ml)


def test_records_and_activity():
    s, ml, nbytes = random_case(1)
    plat = Platform(name="p", sm_count=8, drain_rate_GBps=20.0, t_fixed_us=0.1, producer_issue_GBps=40.0,
                    capacity_points=((8, 100_000.0),))
    r = replay(s, ml, nbytes, plat, ReplayConfig())
    frame = r.tiles(experiment="t", config="c")
    assert set(COLUMNS["tile"]) <= set(frame.columns) and len(frame) == len(s.tiles)
    act = r.activity(bins=50)
    busy = float((act["tensor_active"] * act["width(us)"]).sum() * s.num_sms)
    assert busy == pytest.approx(ml.sum(), rel=1e-9)
    assert act["tensor_active"].between(0, 1 + 1e-9).all()
    assert len(r.occupancy) > 0 and r.occupancy["queue(bytes)"].max() == pytest.approx(r.peak_queue_bytes)
    k = r.kernel(config="c")
    assert set(COLUMNS["kernel"]) <= set(k.columns) and k["time(us)"].iloc[0] == r.makespan_us


def test_bad_input():
    s = interleaved(MoeGrid((2,), 1, 1), pairs=1, lead_rows=0)
    n = len(s.tiles)
    with pytest.raises(InputError, match="deadlocks"):
        replay(s, np.ones(n), np.ones(n), toy())
    with pytest.raises(InputError, match="entries"):
        replay(s, np.ones(n - 1), np.ones(n), toy())
    with pytest.raises(InputError, match="producers"):
        replay(s, np.ones(n), np.ones(n), toy(), ReplayConfig(producers=9))
    with pytest.raises(InputError, match="engine"):
        ReplayConfig(engine="warp")
    with pytest.raises(InputError, match="staging_slots"):
        ReplayConfig(staging_slots=-1)


def test_stall_samples_pair_each_l2_tile_with_its_successor_and_slot_reuser():
    from xstage.sim.reproduce import stall_samples
    s = interleaved(MoeGrid((4,), 1, 1), pairs=1, lead_rows=1)     # per SM: L1 L2 L1 L2 L1 L2 L1 L2
    k = s.column("kind")
    ml = np.where(k == KIND_L1, 1.0, 0.5)
    r = replay(s, ml, np.where(k == KIND_L2, 8.0, 0.0), toy(), ReplayConfig(remote_epilogue_us=0.0))
    span, pred, meas = stall_samples(r, slots=2)
    a = r.arrays
    # first SM: L2 tiles at positions 1, 3, 5 have a successor and a slot reuser (7 is last)
    idx = np.array([1, 3, 5])
    assert len(span) == 2 * len(idx)
    assert np.allclose(span[:3], (a["epi_end"] - a["epi_start"])[idx])
    assert np.allclose(pred[:3], np.maximum(span[:3] - ml[idx + 1], 0))
    assert np.allclose(meas[:3], a["stall"][idx + 2])


@pytest.mark.parametrize("name", ["Qwen3.5/w4a8/balanced/L", "Qwen3.5/w8a8/skewed/M"])
def test_engines_agree_on_sweep_schedules(name):
    """Both engines drive the one FluidQueue in the same order: on the sweep's schedules they agree to 1e-9 us
    per tile, even on Qwen3.5/w4a8/balanced/L's expert-wave replay, where the model itself is chaotic (a
    1e-12 us change to one mainloop moves tile ends by ~2 us; docs/schedules.md)."""
    from xstage.sim.platform import load_platform
    from xstage.sim.sweep import moe_replay_config
    from xstage.sim.workloads.catalog import moe_workload, parse_config
    P = load_platform("paper-b200")
    w = moe_workload(parse_config(name), P, num_sms=148)
    s = w.schedule("expert_wave", 148)
    ml, nb = w.mainloop_us(s), w.remote_bytes(s)
    r = {e: replay(s, ml, nb, P, moe_replay_config(w, record_occupancy=False, engine=e)) for e in ("fast", "simpy")}
    for key in ("ml_start", "ml_end", "epi_start", "epi_end", "stall", "dep_wait"):
        assert np.max(np.abs(r["fast"].arrays[key] - r["simpy"].arrays[key])) <= 1e-9, key
    assert r["fast"].makespan_us == pytest.approx(r["simpy"].makespan_us, rel=1e-12)
