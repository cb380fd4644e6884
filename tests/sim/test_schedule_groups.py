"""Grouped raster of the MoE schedules (``group_rows``): the same tiles, in groups of rows side by side."""

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.sim.schedules import (TILE_KIND, TILE_ROW, deadlock_free, make_moe_schedule, moe_grid,
                                  pair_order)

GRID = moe_grid([700, 130, 0, 390, 1000], hidden=512, intermediate=256, block_m=128, block_n=64)


@pytest.mark.parametrize("kind,kw", [("interleaved", {"lead_rows": 1}), ("interleaved", {"lead_rows": 3}),
                                     ("expert_wave", {}), ("expert_wave", {"wave_experts": 2})])
def test_group_rows_one_is_algorithm_1_and_groups_cover_the_grid(kind, kw):
    base = make_moe_schedule(kind, GRID, 6, **kw)
    same = make_moe_schedule(kind, GRID, 6, group_rows=1, **kw)
    np.testing.assert_array_equal(base.tiles, same.tiles)
    assert "group_rows" not in same.params
    for g in (2, 3, 8):
        s = make_moe_schedule(kind, GRID, 6, group_rows=g, **kw)
        s.check_covers(GRID)
        assert deadlock_free(s) and s.params["group_rows"] == g
        assert len(s.tiles) == len(base.tiles) and not np.array_equal(s.tiles, base.tiles)


def test_pair_order_is_column_major_inside_groups_that_never_straddle_experts():
    P = GRID.l1_pairs
    row, col, first, last = pair_order(GRID, P, 4)
    assert sorted(zip(row, col)) == sorted((r, c) for r in range(GRID.rows) for c in range(P))
    # expert 0 has rows 0-5: a group of 4 rows, then one of 2 (never rows of expert 1)
    assert list(row[:8]) == [0, 1, 2, 3, 0, 1, 2, 3] and list(col[:8]) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert list(row[4 * P:4 * P + 4]) == [4, 5, 4, 5] and set(last[4 * P:6 * P]) == {5}
    expert = GRID.expert_of_row
    assert (expert[first] == expert[row]).all() and (expert[last] == expert[row]).all()
    assert (np.diff(first) >= 0).all()                                  # the merge's cursor stays monotonic


def test_interleaved_lead_counts_from_the_end_of_a_group():
    """In each program an L2 tile comes exactly when the program's L1 cursor reaches a group that starts at
    or after the L2 tile's group end + D: L1 tiles before it start earlier, L1 tiles after it no earlier."""
    D, G = 2, 3
    s = make_moe_schedule("interleaved", GRID, 6, lead_rows=D, group_rows=G)
    row1, _, first1, _ = pair_order(GRID, GRID.l1_pairs, G)
    row2, _, _, last2 = pair_order(GRID, GRID.l2_pairs, G)
    start_of = dict(zip(row1.tolist(), first1.tolist()))
    end_of = dict(zip(row2.tolist(), last2.tolist()))
    checked = 0
    for sm in range(6):
        t = s.sm_tiles(sm)
        kind, row = t[:, TILE_KIND], t[:, TILE_ROW]
        l1_start = np.array([start_of[r] if k == 0 else -1 for k, r in zip(kind, row)])
        for j in np.flatnonzero(kind == 1):
            need = end_of[int(row[j])] + D
            before, after = l1_start[:j][kind[:j] == 0], l1_start[j:][kind[j:] == 0]
            assert (before < need).all() and (after >= need).all()
            checked += 1
    assert checked == (s.tiles[:, TILE_KIND] == 1).sum()


def test_group_rows_must_be_positive():
    with pytest.raises(InputError):
        make_moe_schedule("interleaved", GRID, 6, group_rows=0)
