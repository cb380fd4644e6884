"""Programs per SM (``hw/moe/placement.py``): every program placed once, heavy with light, SM work evened out."""

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.hw.moe.placement import balanced_placement, program_work, sm_work
from xstage.sim.schedules import make_moe_schedule
from xstage.sim.workloads.moe_layout import MoeProblem, dispatch_layout


def test_work_counts_k_and_overhead_per_tile():
    tiles = np.zeros((5, 8), dtype=np.int32)
    tiles[:, 0] = [0, 1, 1, 0, 1]
    w = program_work(tiles, np.array([0, 2, 5]), hidden=100, intermediate=10, overhead_k=1)
    assert w.tolist() == [101 + 11, 11 + 101 + 11]


def test_every_program_once_and_heavy_meets_light():
    work = np.array([9, 1, 5, 5, 8, 2, 3, 7])
    place = balanced_placement(work, n_sm=4, per_sm=2)
    assert sorted(place.tolist()) == list(range(8))
    per_sm = sm_work(work, place, 2)
    assert per_sm.max() - per_sm.min() <= 2          # 9+1, 8+2, 7+3, 5+5
    assert per_sm.tolist() == [10, 10, 10, 10]


def test_wrong_program_count_is_refused():
    with pytest.raises(InputError):
        balanced_placement(np.ones(7), n_sm=4, per_sm=2)


def test_dit_moe_schedule_fullest_sm_shrinks():
    # DiT-MoE-S at two programs per SM: programs take 3 to 5 tiles; pairing program i with i + 132 (one
    # possible dispatch) leaves SMs with 9 tiles, the balanced placement at most 8 (mean 7.6)
    p = MoeProblem(1536, 1536, 3488, local_experts=2, block_n=128)
    s = make_moe_schedule("expert_wave", dispatch_layout(p).grid, 264, group_rows=8).to_arrays()
    tiles_per_program = np.diff(s["sm_offsets"])
    assert tiles_per_program.min() == 3 and tiles_per_program.max() == 5
    place = balanced_placement(program_work(s["tiles"], s["sm_offsets"], 1536, 1536), 132, 2)
    assert sorted(place.tolist()) == list(range(264))
    tiles_per_sm = tiles_per_program[place.reshape(-1, 2)].sum(axis=1)
    ident = tiles_per_program[np.stack([np.arange(132), np.arange(132, 264)], 1)].sum(axis=1)
    assert ident.max() == 9 and tiles_per_sm.max() == 8
