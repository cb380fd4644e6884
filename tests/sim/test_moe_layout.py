"""Dispatch/Combine layout of the fused MoE kernel and the schedule-array handoff (pure numpy, CPU)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from xstage.errors import InputError
from xstage.sim.workloads.moe_layout import MoeProblem, check_layout, dispatch_layout, sequential_schedule
from xstage.sim.schedules import KIND_L1, KIND_L2, deadlock_free, make_moe_schedule

TINY = dict(hidden=64, intermediate=32, tokens=70, local_experts=3, world_size=4, top_k=2, block_m=16, block_n=32)


def test_tiny_layout_pinned():
    p = MoeProblem(**TINY)
    lay = dispatch_layout(p)
    assert lay.tokens_per_expert.tolist() == [24, 23, 23]          # balanced: remainder to the first
    assert lay.grid.rows_per_expert == (2, 2, 2) and lay.recv_rows == 96
    assert p.tokens_per_rank == 18 and p.combine_rows == 36          # 2 * ceil(2 * 70 / (4 * 2)) ... top_k * 18
    valid = lay.valid.reshape(3, 32)
    assert valid[0, :24].all() and not valid[0, 24:].any()
    assert valid[1, :23].all() and not valid[1, 23:].any()
    assert (lay.weight[~lay.valid] == 0).all() and (lay.src_index[~lay.valid] == -1).all()
    check_layout(lay)
    # within an expert, rows follow (source rank, combine row) order
    for e in range(3):
        seg = np.flatnonzero(lay.valid[e * 32:(e + 1) * 32]) + e * 32
        key = lay.dest_rank[seg].astype(np.int64) * p.combine_rows + lay.dest_row[seg]
        assert np.all(np.diff(key) > 0)


def test_skewed_routing_has_a_hot_expert():
    lay = dispatch_layout(MoeProblem(2048, 512, 16384, routing="skewed"))
    counts = lay.tokens_per_expert
    assert counts.sum() == 16384
    assert 0.4 < counts.max() / counts.sum() < 0.6                 # one hot expert (1/8 of 8) takes ~half
    balanced = dispatch_layout(MoeProblem(2048, 512, 16384)).tokens_per_expert
    assert balanced.tolist() == [2048] * 8


def test_combine_bytes_split_local_and_remote():
    p = MoeProblem(2048, 512, 8192, world_size=8)
    lay = dispatch_layout(p)
    b = lay.combine_bytes()
    assert b["local_bytes"] + b["remote_bytes"] == 8192 * 2048 * 2
    assert 0.09 < b["local_bytes"] / (8192 * 2048 * 2) < 0.16       # about 1/W stays on the own rank


def test_tile_remote_bytes_counts_only_other_ranks_of_l2_tiles():
    p = MoeProblem(**TINY)
    lay = dispatch_layout(p)
    s = make_moe_schedule("interleaved", lay.grid, 4, lead_rows=1)
    b = lay.tile_remote_bytes(s.tiles)
    assert np.all(b[s.tiles[:, 0] == KIND_L1] == 0)
    for t, nbytes in zip(s.tiles, b):
        if t[0] == KIND_L2:
            rows = slice(t[6] * 16, (t[6] + 1) * 16)
            others = np.sum((lay.dest_rank[rows] >= 0) & (lay.dest_rank[rows] != p.rank))
            assert nbytes == others * 32 * 2
    # every L2 N tile of a row sends the same bytes; all rows' L2 tiles add up to the remote Combine bytes
    assert b.sum() == lay.combine_bytes()["remote_bytes"]


def test_check_layout_catches_a_second_writer():
    lay = dispatch_layout(MoeProblem(**TINY))
    lay.dest_row[1], lay.dest_rank[1] = lay.dest_row[0], lay.dest_rank[0]
    with pytest.raises(InputError, match="at most one writer"):
        check_layout(lay)


@pytest.mark.parametrize("kw, field", [({"routing": "hot"}, "routing"), ({"rank": 4}, "rank"),
                                       ({"block_n": 31}, "block_n"), ({"intermediate": 48}, "block_n"),
                                       ({"tokens": 0}, "tokens")])
def test_bad_problem(kw, field):
    with pytest.raises(InputError) as err:
        MoeProblem(**{**TINY, **kw})
    assert err.value.args[0].startswith(field)


@settings(max_examples=25, deadline=None)
@given(tokens=st.integers(1, 400), experts=st.integers(1, 6), world=st.integers(1, 8), top_k=st.integers(1, 4),
       skewed=st.booleans(), seed=st.integers(0, 50))
def test_layout_invariants(tokens, experts, world, top_k, skewed, seed):
    p = MoeProblem(64, 32, tokens, local_experts=experts, routing="skewed" if skewed else "balanced",
                   world_size=world, top_k=top_k, seed=seed, block_m=16, block_n=32)
    lay = dispatch_layout(p)
    check_layout(lay)
    assert lay.recv_rows == lay.grid.rows * 16


def test_sequential_schedule_keeps_program_orders_and_dependencies():
    lay = dispatch_layout(MoeProblem(**{**TINY, "tokens": 150, "routing": "skewed"}))
    for kind, kw in (("interleaved", {"lead_rows": 1}), ("expert_wave", {})):
        s = make_moe_schedule(kind, lay.grid, 4, **kw)
        seq = sequential_schedule(s)
        assert seq.num_sms == 1 and len(seq.tiles) == len(s.tiles)
        seq.check_covers(lay.grid)
        assert deadlock_free(seq)
        key = lambda t: (int(t[0]), int(t[1]), int(t[2]), int(t[3]))  # noqa: E731
        pos = {key(t): i for i, t in enumerate(seq.tiles)}
        for sm in range(s.num_sms):  # each program's order survives
            idx = [pos[key(t)] for t in s.sm_tiles(sm)]
            assert idx == sorted(idx)
        done = {}
        for t in seq.tiles:  # every L2 tile after all L1 tiles of its row
            if t[0] == KIND_L1:
                done[t[6]] = done.get(t[6], 0) + 1
            else:
                assert done.get(t[6], 0) == t[7]


def test_sequential_schedule_refuses_lead_zero():
    lay = dispatch_layout(MoeProblem(**TINY))
    with pytest.raises(InputError, match="deadlocks"):
        sequential_schedule(make_moe_schedule("interleaved", lay.grid, 2, lead_rows=0))
