"""The flattened bf16 MoE kernel (``hw/moe/flat.py``): its step and segment arrays (numpy), its output against the
float32 reference in the Triton interpreter (one program, dependencies first, as in test_moe_kernel.py) and, on a
GPU, both schedules at two programs per SM with the written-once counters."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.hw.moe.flat_steps import chunk_k, flat_breaks, segment_arrays, step_arrays
from xstage.sim.schedules import make_moe_schedule
from xstage.sim.workloads.moe_layout import MoeProblem, dispatch_layout


def _arrays(problem, programs, kind="expert_wave", **kw):
    lay = dispatch_layout(problem)
    a = make_moe_schedule(kind, lay.grid, programs, **kw).to_arrays()
    return lay, a["tiles"], a["sm_offsets"]


def test_chunk_is_the_gcd_and_must_hold_whole_k_blocks():
    assert chunk_k(7168, 512, 64) == 512 and chunk_k(1536, 1536, 64) == 1536 and chunk_k(7168, 2048, 64) == 1024
    with pytest.raises(InputError):
        chunk_k(96, 64, 64)   # gcd 32 is not a whole number of 64-column K blocks


def test_steps_cut_each_tile_into_its_chunks_in_order():
    lay, tiles, off = _arrays(MoeProblem(1024, 256, 900, local_experts=3, block_n=128), 4)
    steps, step_off = step_arrays(tiles, off, 1024, 256, 256)
    per_tile = np.where(tiles[:, 0] == 0, 4, 1)
    assert len(steps) == per_tile.sum()
    assert np.array_equal(steps[:, 0], np.repeat(np.arange(len(tiles)), per_tile))   # tile order kept
    first = np.flatnonzero(np.r_[True, steps[1:, 0] != steps[:-1, 0]])
    assert np.all(steps[first, 1] == 0) and np.all(np.diff(steps[:, 1])[np.diff(steps[:, 0]) == 0] == 1)
    assert step_off[0] == 0 and step_off[-1] == len(steps)
    assert np.array_equal(steps[step_off[:-1][np.diff(off) > 0], 0], off[:-1][np.diff(off) > 0])


def test_breaks_only_where_a_wait_one_tile_early_could_deadlock():
    # DiT-MoE-S at two programs per SM: programs end their Linear-1 tiles right before Linear-2 tiles of rows
    # other programs are still producing; a wait one tile early would close a cycle there
    p = MoeProblem(1536, 1536, 3488, local_experts=2, block_n=128)
    lay, tiles, off = _arrays(p, 264, group_rows=16)
    b = flat_breaks(tiles, off, lay.grid.rows)
    starts = off[:-1][np.diff(off) > 0]
    assert b[starts].all() and b.sum() > len(starts)
    assert np.all(tiles[np.flatnonzero(b & ~np.isin(np.arange(len(b)), starts)), 0] == 1)  # breaks before L2 tiles
    # a long schedule with many tiles per program needs none
    lay2, tiles2, off2 = _arrays(MoeProblem(4096, 1024, 8192, block_n=128), 264, group_rows=16)
    assert flat_breaks(tiles2, off2, lay2.grid.rows).sum() == int((np.diff(off2) > 0).sum())


def test_every_tile_its_own_segment_is_the_per_tile_kernel():
    # with a break before every tile the flattened order is the per-tile kernel's: always deadlock-free
    lay, tiles, off = _arrays(MoeProblem(1536, 1536, 3488, local_experts=2, block_n=128), 264, group_rows=16)
    steps, step_off = step_arrays(tiles, off, 1536, 1536, 1536)
    seg_start, seg_off = segment_arrays(np.ones(len(tiles), dtype=bool), step_off, steps)
    assert len(seg_start) == len(tiles) + 1 and np.array_equal(seg_off, off)
    b = flat_breaks(tiles, off, lay.grid.rows)
    seg_start, seg_off = segment_arrays(b, step_off, steps)
    assert seg_off[-1] == len(seg_start) - 1 == b.sum() and seg_start[-1] == len(steps)


INTERPRETED = r"""
import json, torch
from xstage.hw.moe import kernel as M, flat as F
from xstage.hw.moe.flat_steps import chunk_k, chunked_weights, side_by_side
from xstage.sim.workloads.moe_layout import MoeProblem, dispatch_layout, sequential_schedule
from xstage.sim.schedules import Schedule, make_moe_schedule
import numpy as np
assert F.interpreting()
res = {}
for H, I in ((64, 32), (64, 128), (64, 64)):   # Linear-1 in two K chunks; Linear-2 in two; one chunk each
    p = MoeProblem(hidden=H, intermediate=I, tokens=90, local_experts=3, routing="skewed", world_size=4, rank=1,
                   top_k=2, seed=3, block_m=16, block_n=32)
    lay = dispatch_layout(p)
    g = torch.Generator().manual_seed(H + I)
    x = M.dispatch(torch.randn((p.world_size * p.tokens_per_rank, H), generator=g).to(torch.bfloat16), lay)
    w1, w2 = M.random_weights(p, "cpu", seed=I)
    ref = M.reference_moe(x, w1, w2, lay)
    comb = M.Combine(lay, "cpu")
    count = torch.zeros((p.world_size, p.combine_rows, H // p.block_n), dtype=torch.int32)
    c = chunk_k(H, I, 16)
    xa, _ = side_by_side(x, I)
    wc = chunked_weights(M.pack_w1(w1), w2, c)
    full = make_moe_schedule("interleaved", lay.grid, 4, lead_rows=1, group_rows=2)
    t2 = np.concatenate([full.tiles[full.tiles[:, 0] == 1], full.tiles[full.tiles[:, 0] == 0]])
    t2[:, 4] = 0
    t2[:, 5] = np.arange(len(t2))
    for name, sched, spin in (("interleaved", sequential_schedule(full), None),
                              ("expert_wave", sequential_schedule(make_moe_schedule("expert_wave", lay.grid, 4)), None),
                              ("l2_first", Schedule.from_arrays(t2, np.array([0, len(t2)])), 8)):
        dev = M.DeviceLayout(lay, sched.to_arrays(), "cpu")
        comb.poison(); count.zero_()
        F.launch_moe_flat(xa, wc, dev, comb, block_k=16, num_warps=4, num_stages=2, write_count=count,
                          spin_limit=spin, interpreted=True)
        cc = count[torch.as_tensor(lay.dest_rank[lay.valid]).long(), torch.as_tensor(lay.dest_row[lay.valid]).long()]
        res[f"{name}_{H}_{I}"] = {**comb.check(ref), "error": int(dev.error.item()), "written_once": bool((cc == 1).all()),
                                 "count_total": int(count.sum()), "want_total": int(lay.valid.sum()) * (H // 32),
                                 "l2_full": sorted(set(dev.l2_full.tolist())), "l1_per_row": 2 * I // 32}
    res[f"wrong_{H}_{I}"] = comb.check(ref * 1.1)["ok"]
print("RESULT" + json.dumps(res))
"""


@pytest.fixture(scope="module")
def interpreted():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", INTERPRETED], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads([x for x in out.stdout.splitlines() if x.startswith("RESULT")][-1][len("RESULT"):])


@pytest.mark.parametrize("case", ["interleaved_64_32", "expert_wave_64_32", "interleaved_64_128", "expert_wave_64_128",
                                  "interleaved_64_64", "expert_wave_64_64"])
def test_flat_kernel_matches_reference_and_writes_each_row_once(interpreted, case):
    r = interpreted[case]
    assert r["ok"] and r["rel_err"] < 2e-2 and r["unwritten"] == 0 and r["stray"] == 0, r
    assert r["written_once"] and r["count_total"] == r["want_total"] and r["error"] == 0
    assert r["l2_full"] == [r["l1_per_row"]]          # every Linear-1 tile of every row released once


@pytest.mark.parametrize("shape", ["64_32", "64_128", "64_64"])
def test_flat_spin_is_bounded_and_skips_the_tile(interpreted, shape):
    r = interpreted[f"l2_first_{shape}"]
    assert r["error"] == 1 and r["count_total"] == 0 and r["unwritten"] > 0 and not r["ok"]
    assert r["l2_full"] == [r["l1_per_row"]]          # the Linear-1 tiles still ran
    assert not interpreted[f"wrong_{shape}"]         # the check can fail


@pytest.mark.gpu
def test_gpu_flat_both_schedules_two_per_sm():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from xstage.hw.moe import bench as B

    sms = B.num_sms(False)
    kw = {**B.BF16_SHORT_K["kernel"], "flat": True, "num_stages": 2}
    rows = []
    for h, i, t, r, e in ((1536, 1536, 3000, "skewed", 2), (2048, 512, 3000, "balanced", 8),
                          (4096, 1024, 3000, "skewed", 8)):
        rows += B.check_problem(MoeProblem(h, i, t, routing=r, seed=t + h, local_experts=e, block_n=128), sms * 2,
                                kw, seed=h, group_rows=16)
    assert all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
