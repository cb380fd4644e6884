"""The FA predictor's kernel structure: tile order, split tails, per-program speed spread."""

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel, predict_fa, program_factors
from xstage.sim.schedule_fa import fa_qloop, fa_work_items


def test_plain_items_are_fa_qloop():
    s, share, owner = fa_work_items(3, 16384, 132)
    q = fa_qloop(3, 16384, 132)
    assert np.array_equal(s.tiles, q.tiles) and np.array_equal(s.sm_offsets, q.sm_offsets)
    assert np.all(share == 1.0) and np.all(owner)


def test_local_last_order_is_the_triton_kernels():
    # program 0's tiles (head * 512 + m_block) in the Triton tile log at M = 64K, W = 8, rank 0, split tail 2
    # (data/attention/attention-tile.parquet, fused_wb_split): the own chunk (m_block < 64) comes last
    s, share, owner = fa_work_items(3, 65536, 132, order="local_last", world_size=8, tail_parts=2)
    p0 = s.tiles[:, 4] == 0
    tiles = s.tiles[p0, 1] * 512 + s.tiles[p0, 2]
    assert tiles.tolist() == [64, 196, 328, 460, 656, 788, 920, 1116, 1248, 1380, 1512, 556, 1070]
    assert share[p0].tolist() == [1.0] * 11 + [0.5, 0.5]
    # every tile is covered once by whole items or by its parts; one owner per tile
    assert owner.sum() == 1536 and share.sum() == pytest.approx(1536)
    assert len(share) == 1536 - 84 + 2 * 84


def test_fa_only_split_tail_sets_the_qloop():
    # 8K: 168 tiles on 132 programs; the FA-only kernel's 36 tail tiles in halves run in half a Q-loop
    p = load_platform("h200-pcie-host")
    r = predict_fa(FaKernel(seq_len=8192, fa_us=206.0, fa_tail_parts=2), p)
    assert r["qloop_us"] == pytest.approx(206.0 / 1.5)
    assert r["fa_us"] == pytest.approx(206.0)
    # the fused kernel without the split runs two whole waves: its compute alone is 2 Q-loops
    assert r["fused_us"] >= 2 * r["qloop_us"] - 1e-9


def test_only_the_owner_part_stores():
    p = load_platform("h200-pcie-host")
    a = predict_fa(FaKernel(seq_len=8192, fa_us=206.0, tail_parts=2, remote_fraction=1.0), p)
    b = predict_fa(FaKernel(seq_len=8192, fa_us=206.0, remote_fraction=1.0), p)
    assert a["remote_MiB"] == pytest.approx(b["remote_MiB"]) == pytest.approx(192 * 32768 / 2**20)


def test_program_spread_is_below_the_slowest_program():
    k = FaKernel(seq_len=65536, fa_us=12000.0, program_spread=0.04)
    f = program_factors(k, 132)
    assert f.min() == pytest.approx(0.96) and f.max() == pytest.approx(1.0) and len(np.unique(f)) == 132
    r = predict_fa(k, load_platform("h200-pcie-host"))
    # the slowest of the programs that run 12 tiles sets the FA-only makespan
    n = np.where(np.arange(132) < 1536 % 132, 12, 11)
    assert r["qloop_us"] == pytest.approx(12000.0 / np.max(n * f), rel=1e-12)


def test_desynchronised_programs_hide_more_of_the_drain():
    p = load_platform("h200-pcie-host")
    kw = dict(seq_len=65536, fa_us=12000.0, exit_waits_for_drain=True, sm_store_GBps=52.8, shared_buffer_MiB=0.01,
              remote_fraction=1.0)
    locked = predict_fa(FaKernel(**kw), p)
    drift = predict_fa(FaKernel(**kw, program_spread=0.05, fa_program_spread=0.0), p)
    assert drift["E_res_us"] < locked["E_res_us"]
    # lockstep tile-end bursts with no buffer: each wave waits for its burst at R, nothing hidden
    assert locked["E_res_us"] == pytest.approx(locked["a2a_us"], rel=0.02)


@pytest.mark.parametrize("field,kw", [
    ("order", {"order": "random"}),
    ("tail_parts", {"tail_parts": 0}),
    ("fa_tail_parts", {"fa_tail_parts": 1000}),
    ("program_spread", {"program_spread": 1.0}),
    ("fa_program_spread", {"fa_program_spread": -0.1}),
    ("spread_seed", {"spread_seed": -1}),
    ("mainloop_factor", {"mainloop_factor": 0.0}),
    ("sm_pool_GBps", {"sm_pool_GBps": -5.0}),
])
def test_bad_structure_names_the_field(field, kw):
    with pytest.raises(InputError, match=field):
        FaKernel(seq_len=8192, **kw)


def test_mainloop_factor_slows_only_the_fused_kernel():
    p = load_platform("h200-pcie-host")
    local = dict(seq_len=16384, fa_us=800.0, remote_fraction=0.0)
    a = predict_fa(FaKernel(**local), p)
    b = predict_fa(FaKernel(**local, mainloop_factor=1.05), p)
    assert b["fa_us"] == pytest.approx(a["fa_us"]) and b["qloop_us"] == pytest.approx(a["qloop_us"])
    # nothing stored: the residual is the fused kernel's own slower code, 5 % of its makespan
    assert a["E_res_us"] == pytest.approx(0.0, abs=1e-9)
    assert b["E_res_us"] == pytest.approx(0.05 * 800.0)
