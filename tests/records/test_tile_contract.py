"""The int32 tiles[T, 8] contract between schedules, simulator and kernels: named fields."""

import numpy as np

from xstage.sim import schedules
from xstage.sim.schedule_fa import fa_qloop
from xstage.sim.schedules import TILE_FIELDS, MoeGrid, interleaved


def test_every_field_has_its_index_constant_in_order():
    assert TILE_FIELDS == ("kind", "expert", "m_block", "n_block", "sm", "seq", "row", "l2_need")
    for i, name in enumerate(TILE_FIELDS):
        assert getattr(schedules, f"TILE_{name.upper()}") == i
    assert schedules.TILE_COLUMNS == TILE_FIELDS


def test_named_fields_read_the_schedules_columns():
    moe = interleaved(MoeGrid((2, 1), 2, 2), 2, 1)
    fa = fa_qloop(2, 512, 3, block_m=128)
    for s in (moe, fa):
        for name in TILE_FIELDS:
            assert np.array_equal(s.column(name), s.tiles[:, getattr(schedules, f"TILE_{name.upper()}")])
    assert set(moe.column("kind")) == {schedules.KIND_L1, schedules.KIND_L2}
    assert moe.column("l2_need")[moe.column("kind") == schedules.KIND_L2].tolist() == [4] * 12
    assert fa.column("sm").tolist() == [0, 0, 0, 1, 1, 1, 2, 2]
