"""Two programs per SM (issue 17): the residency arithmetic, the short-K configuration choice and the
tile-log gap figure of benchmarks/moe_shortk_tune.py, all on the CPU."""

import sys
from pathlib import Path

import numpy as np
import pytest

from xstage.hw.moe.residency import SM90_LIMITS, resident_per_sm


@pytest.mark.parametrize("n_regs, shared, warps, per_sm", [
    (128, 98328, 8, 2),     # the short-K configuration as compiled on the H200: registers and shared both allow 2
    (255, 81936, 4, 2),     # one warpgroup at 255 registers: 2 x 4 warps x 8192 registers fill the file
    (255, 81936, 8, 1),     # the same without a register cap at 8 warps: one program only
    (128, 150000, 8, 1),    # three 48 KB stages (BLOCK_N 256): shared memory allows one
    (32, 0, 1, 32),         # tiny programs: the 32-CTA limit
])
def test_resident_per_sm(n_regs, shared, warps, per_sm):
    assert resident_per_sm(n_regs, shared, warps) == per_sm


def test_resident_per_sm_uses_the_limits_it_is_given():
    assert resident_per_sm(128, 98328, 8, {**SM90_LIMITS, "shared_bytes": 150000}) == 1


def test_short_k_configuration_is_chosen_by_intermediate():
    from xstage.hw.moe import bench as B

    kw, kw8 = dict(B.BF16_FAST), dict(B.W8A8_FAST)
    blocks, pps, k = B.config_tiles("bf16", B.SHORT_K_MAX, kw, kw8, False)
    assert (blocks, pps, k.get("maxnreg")) == ({"block_n": 128}, 2, 128)
    assert B.config_tiles("bf16", 2 * B.SHORT_K_MAX, kw, kw8, False) == ({"block_n": B.BLOCK_N}, 1, kw)
    assert B.config_tiles("w8a8", 512, kw, kw8, False) == ({"block_n": B.BLOCK_N}, 1, kw8)
    assert B.config_tiles("bf16", 512, kw, kw8, True)[1] == 1


def test_dit_moe_shapes_get_two_programs_per_sm_and_i2048_does_not():
    # small-tune-3a1632c: I = 1536 (DiT-MoE) gains from two programs per SM, I = 2048 did not (shortk-tune-f6372ea)
    from xstage.hw.moe import bench as B

    kw, kw8 = dict(B.BF16_FAST), dict(B.W8A8_FAST)
    assert B.config_tiles("bf16", 1536, kw, kw8, False)[:2] == ({"block_n": 128}, 2)
    assert B.config_tiles("bf16", 2048, kw, kw8, False)[:2] == ({"block_n": B.BLOCK_N}, 1)
    assert B.config_tiles("w8a8", 1536, kw, kw8, False)[1] == 1


def test_tuning_scripts_select_configurations_by_label():
    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
    import moe_shortk
    import moe_small_tune

    assert len(moe_small_tune.configs()) == len(moe_small_tune.WANT) == 8
    got = moe_small_tune.configs("h2048-i4096-t8192-e8-balanced-bf16-w8-s0")
    assert [c[1:5] for c in got] == [(2048, 4096, 8192, "balanced")]
    dit = moe_shortk.configs("h1536-i1536-t3488-e2-skewed-bf16-w8-s0,nonesuch")
    assert [(c[0], c[4]) for c in dit] == [("DiT-MoE-S", "skewed")]
    every = moe_shortk.configs()
    assert {c[2] for c in every} == {512, 1024, 1536} and all(c[5] == "bf16" for c in every)


def test_l2_gaps_from_a_tile_log():
    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
    from moe_shortk_tune import l2_gaps

    # program 0: L1 [0, 10], L2 [12, 15], L2 [19, 22]; program 1: L2 [0, 4], L2 [5, 9] (its seq out of order)
    tiles = np.array([[0], [1], [1], [1], [1]])
    log = np.zeros((5, 8), dtype=np.int64)
    log[:, 0] = [0, 0, 0, 1, 1]
    log[:, 2] = [0, 1, 2, 1, 0]
    log[:, 4] = np.array([0, 12, 19, 5, 0]) * 1000
    log[:, 5] = np.array([10, 15, 22, 9, 4]) * 1000
    got = l2_gaps(tiles, log)
    assert got["l2_gap_us"] == pytest.approx(2.5)          # 19 - 15 and 5 - 4: the L1 -> L2 step is not counted
    assert got["l2_mainloop_us"] == pytest.approx(3.5) and got["l1_mainloop_us"] == pytest.approx(10)
