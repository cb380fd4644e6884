"""``balance``: the L1 and L2 deals' remainders on different CTA pairs; the same tiles, each pair's order merged
as Algorithm 1, the most loaded pair at most one tile pair over the mean."""

import numpy as np
import pytest

from xstage.sim.schedules import (KIND_L1, TILE_EXPERT, TILE_KIND, TILE_M_BLOCK, TILE_N_BLOCK, TILE_SM, deadlock_free,
                                  make_moe_schedule, moe_grid)

# DiT-MoE-M's grid on one H200 at two programs per SM: 56 row blocks, 12 L1 and 6 L2 tile pairs per row
DIT_M = moe_grid([3488, 3488], hidden=1536, intermediate=1536, block_m=128, block_n=128)
SKEWED = moe_grid([700, 130, 0, 390, 1000], hidden=512, intermediate=256, block_m=128, block_n=64)


def per_program(s):
    return np.diff(s.sm_offsets)


@pytest.mark.parametrize("grid,sms", [(DIT_M, 264), (SKEWED, 6), (SKEWED, 10)])
@pytest.mark.parametrize("kind,kw", [("interleaved", {"lead_rows": 2}), ("expert_wave", {}),
                                     ("interleaved", {"lead_rows": 1, "group_rows": 16})])
def test_balance_deals_the_same_tiles_without_stacking_the_remainders(grid, sms, kind, kw):
    base = make_moe_schedule(kind, grid, sms, **kw)
    bal = make_moe_schedule(kind, grid, sms, balance=True, **kw)
    bal.check_covers(grid)
    assert deadlock_free(bal) and bal.params["balance"] is True and "balance" not in base.params
    assert len(bal.tiles) == len(base.tiles)
    pairs = sms // 2
    l1 = grid.rows * grid.l1_pairs
    l2 = grid.rows * grid.l2_pairs
    # tiles per program: the L1 and L2 remainders never land on the same CTA pair
    n = per_program(bal)
    assert n.max() - n.min() <= 1 + (l1 % pairs == 0 and l2 % pairs == 0)
    assert n.max() <= -(-(l1 + l2) // pairs)
    # the L1 tiles a program owns are the same; only the L2 deal moves
    cols = [TILE_EXPERT, TILE_M_BLOCK, TILE_N_BLOCK]

    def owned(s):
        t = s.tiles[s.tiles[:, TILE_KIND] == KIND_L1]
        return [sorted(map(tuple, t[t[:, TILE_SM] == p][:, cols].tolist())) for p in range(sms)]

    assert owned(bal) == owned(base)


def test_balance_lowers_dit_m_most_loaded_program_from_nine_tiles_to_eight():
    base = make_moe_schedule("interleaved", DIT_M, 264, lead_rows=11, group_rows=16)
    bal = make_moe_schedule("interleaved", DIT_M, 264, lead_rows=11, group_rows=16, balance=True)
    assert per_program(base).max() == 9 and per_program(bal).max() == 8
    assert per_program(bal).sum() == per_program(base).sum() == 2016
