"""The Ulysses post-attention All-to-All layout (pure numpy)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xstage.errors import InputError
from xstage.sim.workloads.a2a_layout import A2ALayout, all_to_all, head_partition
from xstage.hw.attention.config import AttentionConfig, balanced_parts


def test_small_case_by_hand():
    lay = A2ALayout(seq_len=16, heads=2, head_dim=4, world_size=4, rank=1, block_m=2)
    assert lay.chunk_rows == 4 and lay.heads_total == 8 and lay.dest_shape == (4, 8, 4)
    assert lay.m_blocks == 8 and lay.num_tiles == 16 and lay.tile_bytes == 2 * 4 * 2
    dest, row = lay.dest_of_row([0, 3, 4, 9, 15])
    assert dest.tolist() == [0, 0, 1, 2, 3] and row.tolist() == [0, 3, 0, 1, 3]
    assert lay.dest_head([0, 1]).tolist() == [2, 3]
    assert lay.tile_of(9) == (1, 1)
    assert lay.total_bytes == 16 * 2 * 4 * 2 and lay.remote_bytes == lay.total_bytes * 3 // 4


def test_tile_plan_pins_destinations():
    lay = A2ALayout(seq_len=16, heads=2, head_dim=4, world_size=4, rank=1, block_m=2)
    plan = lay.tile_plan()
    assert len(plan) == 16
    row = plan.iloc[11]  # head 1, m_block 3 → rows 6..7 → rank 1 (self), rows 2..3 there
    assert [int(row[c]) for c in ("head", "m_block", "row0", "dest_rank", "dest_row0", "dest_head")] == [1, 3, 6, 1, 2, 3]
    assert not row.remote and row.bytes_remote == 0
    assert plan["bytes_remote"].sum() == lay.remote_bytes
    assert plan.groupby("dest_rank").size().tolist() == [4, 4, 4, 4]


@pytest.mark.parametrize("kwargs, field", [
    (dict(seq_len=100, heads=1, head_dim=64, world_size=8), "seq_len"),
    (dict(seq_len=1024, heads=1, head_dim=64, world_size=8, block_m=256), "block_m"),
    (dict(seq_len=1024, heads=1, head_dim=64, world_size=8, rank=8), "rank"),
    (dict(seq_len=1024, heads=0, head_dim=64), "heads"),
    (dict(seq_len=1024, heads=1, head_dim=64, rank=-1), "rank"),
])
def test_bad_shapes_raise_input_error(kwargs, field):
    with pytest.raises(InputError) as err:
        A2ALayout(**kwargs)
    assert err.value.field == field


def test_rows_out_of_range():
    lay = A2ALayout(seq_len=16, heads=1, head_dim=4, world_size=2, block_m=2)
    with pytest.raises(InputError):
        lay.dest_of_row([16])


def test_scatter_places_rows_and_leaves_other_columns():
    lay = A2ALayout(seq_len=8, heads=2, head_dim=3, world_size=2, rank=1, block_m=2)
    out = np.arange(8 * 2 * 3, dtype=np.float32).reshape(8, 2, 3)
    bufs = lay.scatter(out)
    assert len(bufs) == 2 and bufs[0].shape == (4, 4, 3)
    np.testing.assert_array_equal(bufs[1][2, 3], out[6, 1])  # row 6 → rank 1, row 2; head 1 → column 3
    assert np.isnan(bufs[0][:, :2]).all() and not np.isnan(bufs[0][lay.sender_slice()]).any()


@settings(max_examples=25, deadline=None)
@given(world=st.sampled_from([1, 2, 4, 8]), heads=st.integers(1, 3), chunk_blocks=st.integers(1, 3),
       block_m=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**16))
def test_scatter_of_every_sender_is_the_all_to_all_and_inverts_the_head_partition(world, heads, chunk_blocks,
                                                                                  block_m, seed):
    seq_len, head_dim = world * chunk_blocks * block_m, 2
    rng = np.random.default_rng(seed)
    outs = [rng.standard_normal((seq_len, heads, head_dim)) for _ in range(world)]
    expected = all_to_all(outs)
    merged = [np.full((seq_len // world, world * heads, head_dim), np.nan) for _ in range(world)]
    for r, out in enumerate(outs):
        lay = A2ALayout(seq_len, heads, head_dim, world, r, block_m)
        for j, buf in enumerate(lay.scatter(out)):
            own = lay.sender_slice()
            assert np.isnan(merged[j][own]).all()  # senders own disjoint columns
            merged[j][own] = buf[own]
        plan = lay.tile_plan()  # every tile's rows land where dest_of_row says
        dest, row = lay.dest_of_row(plan["row0"] + block_m - 1)
        assert (dest == plan["dest_rank"]).all() and (row == plan["dest_row0"] + block_m - 1).all()
    for got, want in zip(merged, expected):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(head_partition(expected), outs):
        np.testing.assert_array_equal(got, want)


def test_work_order_puts_the_own_chunk_last():
    lay = A2ALayout(seq_len=16, heads=2, head_dim=4, world_size=4, rank=1, block_m=2)
    order = lay.work_order()
    assert sorted(order.tolist()) == list(range(16))
    assert order.tolist()[-4:] == [2, 3, 10, 11]  # head 0 and 1, m-blocks 2, 3 = rows 4..7 = rank 1's chunk
    assert order.tolist()[:4] == [0, 1, 4, 5]
    assert lay.work_order(local_last=False).tolist() == list(range(16))


# --- the split tail's balance (AttentionConfig.tail_split, balanced_parts) ----------------------------
@pytest.mark.parametrize("seq_len, parts, whole", [
    (8192, 11, 132), (16384, 11, 264), (32768, 11, 660), (49152, 11, 1056), (65536, 11, 1452)])
def test_balanced_tail_on_132_sms_cuts_every_tail_tile_in_11(seq_len, parts, whole):
    """3 heads, b_m = 128 on 132 programs: the tail holds 60/120/108/96/84 tiles, all multiples of 12,
    so 11 parts fill the 132 programs exactly (halves would leave the last wave a whole Q-loop long)."""
    cfg = AttentionConfig(seq_len, 3, 128, 8, block_n=128, split_tail=True, tail_parts=0)
    assert cfg.tail_split(132) == (whole, parts)
    tail = cfg.layout.num_tiles - whole
    assert tail * parts % 132 == 0
    assert AttentionConfig(seq_len, 3, 128, 8, block_n=128, split_tail=True).tail_split(132) == (whole, 2)


def test_balanced_parts_takes_the_smallest_count_of_the_shortest_wave():
    assert balanced_parts(1, 3, 8) == 3                # 1/3 of a Q-loop (6 parts would tie)
    assert balanced_parts(60, 132, 64) == 11           # 5/11
    assert balanced_parts(131, 132, 64) == 1           # no count under 17 beats a whole Q-loop: no split
    assert balanced_parts(120, 132, 4) == 1            # only 4 K/V steps: 2, 3 or 4 parts all leave a whole loop
    assert balanced_parts(66, 132, 64) == 2            # halves fill 132 programs exactly
    for tail, programs in ((120, 132), (7, 16), (5, 12)):
        k = balanced_parts(tail, programs, 64)
        best = min(math.ceil(tail * j / programs) / j for j in range(1, 17))
        assert math.ceil(tail * k / programs) / k == best


def test_tail_split_without_a_partial_wave_or_split_is_whole():
    assert AttentionConfig(16384, 3, 128, 8, block_n=128).tail_split(132) == (384, 1)
    assert AttentionConfig(16384, 3, 128, 8, block_n=128, split_tail=True).tail_split(128) == (384, 1)  # 3 waves
