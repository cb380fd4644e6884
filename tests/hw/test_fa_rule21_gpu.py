"""Rule 21's instrument (``benchmarks/gpu/fa_rule20.py`` over a plan with the ``hbm`` control arm, warm pairs in the
stream as rule 21's plan has them, and the seeded pair order) at one small point on a GPU: the setup and final checks
of FA-only, the fused build and ``split_hbm`` pass; each arm's block has its pairs in the seeded order with both
launch times; the ``hbm`` block has no probe and no host pages, the ``keep`` block both; one round of ``sweep``
records what the plan asked."""

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

GPU = torch.cuda.is_available()
GPU_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


def _load(name: str, as_name: str):
    spec = importlib.util.spec_from_file_location(as_name, GPU_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_gpu_hbm_arm_small_point(monkeypatch):
    sys.path.insert(0, str(GPU_DIR))
    R19 = _load("fa_rule19", "fa_rule19")
    monkeypatch.setitem(sys.modules, "fa_rule19", R19)          # the device script's, not benchmarks/fa_rule19.py
    G = _load("fa_rule20", "fa_rule20_gpu")
    plan = {"rounds": 2, "arms": ["keep", "hbm"], "hbm_rounds": 1, "warm_pairs": 2, "warm": "in_stream",
            "order": "random",
            "points": [{"M": 4096, "heads": 3, "head_dim": 64, "block_n": 64, "pairs_per_block": 6, "seed": 3}]}
    s = G.plan_settings(plan)
    pt = G.Point(R19.point_config(plan["points"][0]), 3, s["arms"])
    assert [(c["variant"], c["ok"]) for c in pt.checks] == [("fa", True), ("fused_wb_split", True),
                                                            ("split_hbm", True)], pt.checks
    assert set(pt.graphs) == {"keep", "hbm"}
    for arm in ("hbm", "keep"):
        order = G.pair_order("random", G.block_seed(3, arm, 0), 6)
        raw, row, check = pt.block(arm, 6, 2, order, s["warm"])      # rule 21's plan: warm pairs in the stream
        assert check is None
        assert [r["base_first"] for r in raw] == order
        assert {r["variant"] for r in raw} == {"split_hbm" if arm == "hbm" else "fused_wb_split"}
        assert all(r["base_us"] > 0 and r["other_us"] > 0 for r in raw)
        assert row["host_end(s)"] >= row["host_start(s)"]
        if arm == "hbm":
            assert row["probe(us)"] == [] and row["pages"] == 0 and row["buffer_ptr"] is None
        else:
            assert len(row["probe(us)"]) == G.PROBE_REPS and row["pages"] > 0
    meta, pair_rows, block_rows = {"checks": [], "rounds_done": 0}, [], []
    G.sweep([pt], [6], s, 1e9, meta, pair_rows, block_rows, log=lambda line: None)
    assert meta["rounds_done"] == 2
    assert [(b["arm"], b["round"], b["pairs"]) for b in block_rows] == [("keep", 0, 6), ("hbm", 0, 6), ("keep", 1, 6)]
    assert {(b["warm_pairs"], b["warm"]) for b in block_rows} == {(2, "in_stream")}
    assert len(pair_rows) == 18
    assert all(c["ok"] for c in pt.final_checks())
