"""Rule 19's device measurement (``benchmarks/gpu/fa_rule19.py``) at a small size on a GPU: every check passes, every
block has its pairs with both launch times, and the in-pair block logs its launches."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

GPU = torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_gpu_measure_point_small():
    import sys
    from dataclasses import replace
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"))
    import fa_rule19

    from xstage.hw.attention.config import AttentionConfig

    base = AttentionConfig(16384, 3, 128, 8, block_n=128, num_stages=3, tma=True, store_cache=".wt", stagger=True,
                           split_tail=True)
    cfg = replace(base, seq_len=4096, heads=3, head_dim=64, block_n=64)
    rows, checks, stats, launches, waves = fa_rule19.measure_point(cfg, 4, 2, seed=3)
    assert len(checks) == 5 and all(c["ok"] for c in checks), checks
    count = {}
    for r in rows:
        count[(r["protocol"], r["block"], r["variant"])] = count.get((r["protocol"], r["block"], r["variant"]), 0) + 1
        assert r["base_us"] > 0 and r["other_us"] > 0
    assert count == {("graph", b, "fused_wb_split"): 4 for b in "AB"} | {("graph", b, "split_hbm"): 2 for b in "AB"} \
        | {("direct", "-", v): fa_rule19.N_DIRECT for v in ("fused_wb_split", "split_hbm")}
    assert len(launches) == 4 * fa_rule19.N_INPAIR and waves
    assert all(v["n_regs"] for v in stats.values())
