"""Tile schedules: exact orders of hand-worked cases, the array contract, invariants."""

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.sim.schedule_fa import burst_waves, fa_qloop
from xstage.sim.schedules import (KIND_L1, KIND_L2, TILE_COLUMNS, MoeGrid, Schedule, _merge_literal, deadlock_free,
                                  default_waves, expert_wave, interleaved, make_moe_schedule, moe_grid)


def order(s, sm):
    """SM ``sm``'s tiles as ('L1'|'L2', expert, m_block, n_block)."""
    return [("L1" if k == KIND_L1 else "L2", e, m, n) for k, e, m, n, *_ in s.sm_tiles(sm).tolist()]


# Grid of the hand-worked examples: expert 0 has 2 row blocks, expert 1 has 1 (P = 3 rows);
# P1 = 2 pairs per row (4 L1 N tiles), P2 = 1 pair per row (2 L2 N tiles); G = 2 pairs (4 SMs).
GRID = MoeGrid((2, 1), l1_pairs=2, l2_pairs=1)


def test_interleaved_d1_exact_order():
    # Algorithm 1 by hand, g = 0: k1 = k2 = 0.
    #  p1=0 p2=0: 0+1<=0 no  -> L1 row 0 n=r        k1=2
    #  p1=1 p2=0: 0+1<=1 yes -> L2 row 0 n=r        k2=2
    #  p1=1 p2=2: no         -> L1 row 1 n=r        k1=4
    #  p1=2 p2=2: no         -> L1 row 2 n=r        k1=6 (L1 done, p1 = inf)
    #  L2 row 2 n=r
    # g = 1: k1 = k2 = 1: L1 row 0 n=2+r, L1 row 1 n=2+r, (p2=1, p1=2) L2 row 1 n=r, L1 row 2 n=2+r.
    s = interleaved(GRID, pairs=2, lead_rows=1)
    assert order(s, 0) == [("L1", 0, 0, 0), ("L2", 0, 0, 0), ("L1", 0, 1, 0), ("L1", 1, 0, 0), ("L2", 1, 0, 0)]
    assert order(s, 1) == [("L1", 0, 0, 1), ("L2", 0, 0, 1), ("L1", 0, 1, 1), ("L1", 1, 0, 1), ("L2", 1, 0, 1)]
    assert order(s, 2) == [("L1", 0, 0, 2), ("L1", 0, 1, 2), ("L2", 0, 1, 0), ("L1", 1, 0, 2)]
    assert order(s, 3) == [("L1", 0, 0, 3), ("L1", 0, 1, 3), ("L2", 0, 1, 1), ("L1", 1, 0, 3)]
    assert s.sm_offsets.tolist() == [0, 5, 10, 14, 18]
    # row and l2_need columns: rows go expert by expert, L2 needs all 4 L1 tiles of its row
    assert s.sm_tiles(2)[:, 6].tolist() == [0, 1, 1, 2]
    assert s.sm_tiles(2)[:, 7].tolist() == [0, 0, 4, 0]
    assert deadlock_free(s)


def test_expert_wave_exact_order():
    # One expert per wave: rows 0-1 (expert 0) end at row 2, row 2 (expert 1) at row 3.
    # g = 0: L1 row 0, L1 row 1, (p1 = 2 >= 2) L2 row 0, (p2 = 2 needs p1 >= 3) L1 row 2, L2 row 2.
    s = expert_wave(GRID, pairs=2, wave_experts=1)
    assert s.params["wave_experts"] == [1, 1]
    assert order(s, 0) == [("L1", 0, 0, 0), ("L1", 0, 1, 0), ("L2", 0, 0, 0), ("L1", 1, 0, 0), ("L2", 1, 0, 0)]
    assert order(s, 2) == [("L1", 0, 0, 2), ("L1", 0, 1, 2), ("L2", 0, 1, 0), ("L1", 1, 0, 2)]
    assert deadlock_free(s)


def test_lead_zero_deadlocks_and_larger_lead_does_not():
    assert not deadlock_free(interleaved(GRID, 2, 0))   # L2 of row p before this SM's own L1 of row p
    for D in (1, 2, 3, 10):
        assert deadlock_free(interleaved(GRID, 2, D))


@pytest.mark.parametrize("seed", range(6))
def test_vectorized_merge_is_algorithm_1(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        rows = rng.integers(0, 5, size=rng.integers(1, 6))
        rows[0] = max(rows[0], 1)
        g = MoeGrid(tuple(rows), int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        pairs, D = int(rng.integers(1, 6)), int(rng.integers(0, 4))
        t, off = _merge_literal(g, pairs, lambda p1, p2: p2 + D <= p1)
        s = interleaved(g, pairs, D)
        assert np.array_equal(s.tiles, t) and np.array_equal(s.sm_offsets, off)


@pytest.mark.parametrize("D", [1, 2, 5])
def test_every_tile_once_and_dependencies_ordered(D):
    g = moe_grid([300, 0, 129, 1000, 64], hidden=1024, intermediate=512, block_m=128, block_n=128)
    for s in (interleaved(g, 6, D), expert_wave(g, 6), expert_wave(g, 6, wave_experts=[2, 3])):
        s.check_covers(g)
        assert deadlock_free(s)
        for sm in range(s.num_sms):
            t = s.sm_tiles(sm)
            for i in np.flatnonzero(t[:, 0] == KIND_L2):
                # this SM's own L1 tiles of the row come before the L2 tile that needs them
                later = t[i + 1:]
                assert not np.any((later[:, 0] == KIND_L1) & (later[:, 6] == t[i, 6]))


def test_long_run_ratio_does_not_depend_on_lead():
    g = moe_grid([128 * 40] * 4, hidden=2048, intermediate=1024, block_m=128, block_n=128)  # P1 = 8, P2 = 8
    ratios = []
    for D in (1, 2, 4, 8):
        s = interleaved(g, 10, D)
        mid = []
        for sm in range(s.num_sms):
            k = s.sm_tiles(sm)[:, 0]
            mid.append(k[len(k) // 4: 3 * len(k) // 4])
        k = np.concatenate(mid)
        ratios.append(np.sum(k == KIND_L1) / np.sum(k == KIND_L2))
    expected = g.l1_pairs / g.l2_pairs
    assert np.allclose(ratios, expected, rtol=0.05), ratios


def test_default_waves_routing_blind():
    g = MoeGrid((10, 1, 1, 1, 1, 1), l1_pairs=2, l2_pairs=2)
    # average rows 2.5 -> 10 L1 tiles per expert; imbalance 4 x 8 SMs = 32 tiles -> 4 experts per wave
    assert default_waves(g, 8, imbalance=4) == [4, 2]
    assert default_waves(g, 8, avg_rows_per_expert=100, imbalance=4) == [1] * 6


def test_arrays_roundtrip(tmp_path):
    s = interleaved(GRID, 2, 1)
    a = s.to_arrays()
    assert a["tiles"].dtype == np.int32 and a["tiles"].shape == (18, 8) and a["sm_offsets"].dtype == np.int32
    assert TILE_COLUMNS == ("kind", "expert", "m_block", "n_block", "sm", "seq", "row", "l2_need")
    back = Schedule.from_arrays(a["tiles"], a["sm_offsets"])
    assert np.array_equal(back.tiles, s.tiles)
    path = s.save(tmp_path / "s.npz")
    loaded = Schedule.load(path)
    assert loaded.name == "interleaved" and loaded.params["lead_rows"] == 1
    assert np.array_equal(loaded.tiles, s.tiles) and np.array_equal(loaded.sm_offsets, s.sm_offsets)


def test_bad_arrays_rejected():
    a = interleaved(GRID, 2, 1).to_arrays()
    bad = a["tiles"].copy()
    bad[1, 5] = 7                                       # seq column broken
    with pytest.raises(InputError, match="seq"):
        Schedule.from_arrays(bad, a["sm_offsets"])
    with pytest.raises(InputError, match="sm_offsets"):
        Schedule.from_arrays(a["tiles"], a["sm_offsets"][:-1])
    dup = a["tiles"].copy()
    dup[1, :4] = dup[0, :4]
    with pytest.raises(InputError, match="repeat"):
        Schedule.from_arrays(dup, a["sm_offsets"])
    with pytest.raises(InputError, match="shape"):
        Schedule.from_arrays(a["tiles"][:, :7], a["sm_offsets"])


def test_bad_inputs():
    with pytest.raises(InputError, match="lead_rows"):
        interleaved(GRID, 2, -1)
    with pytest.raises(InputError, match="empty"):
        moe_grid([0, 0], hidden=256, intermediate=128)
    with pytest.raises(InputError, match="block_n"):
        moe_grid([10], hidden=256, intermediate=100, block_n=64)
    with pytest.raises(InputError, match="block_n"):
        moe_grid([10], hidden=200, intermediate=128, block_n=64)
    with pytest.raises(InputError, match="schedule"):
        make_moe_schedule("zigzag", GRID, 4)
    with pytest.raises(InputError, match="even"):
        make_moe_schedule("interleaved", GRID, 5)
    with pytest.raises(InputError, match="add up"):
        expert_wave(GRID, 2, wave_experts=[1])


def test_fa_qloop_round_robin():
    s = fa_qloop(heads=2, seq_len=512, num_sms=3, block_m=128)   # 2 heads x 4 blocks = 8 tiles
    assert s.sm_offsets.tolist() == [0, 3, 6, 8]
    assert s.column("row").tolist() == [0, 3, 6, 1, 4, 7, 2, 5]
    assert s.sm_tiles(1)[:, [1, 2]].tolist() == [[0, 1], [1, 0], [1, 3]]   # (head, m_block)
    assert np.all(s.column("kind") == 2) and np.all(s.column("l2_need") == 0)
    assert burst_waves(2, 512, 3) == 3
    with pytest.raises(InputError, match="block_m"):
        fa_qloop(1, 500, 4)
