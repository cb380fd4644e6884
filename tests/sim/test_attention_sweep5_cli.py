"""``benchmarks/gpu/attention_triton_sweep5.py``'s points with block_n (CPU; the sweep itself runs on a GPU)."""

import importlib.util
import sys
from pathlib import Path

import pytest

GPU = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


@pytest.fixture(scope="module")
def mod():
    sys.path.insert(0, str(GPU))
    spec = importlib.util.spec_from_file_location("attention_triton_sweep5", GPU / "attention_triton_sweep5.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_points_default_heads_head_dim_and_block_n(mod):
    assert mod.points("32768:3:128:64, 30720:3:64,8192") == [(32768, 3, 128, 64), (30720, 3, 64, 128),
                                                              (8192, 3, 128, 128)]
    for bad in ("32768:3:128:48", "32768:3:128:8", "1:2:3:4:5", "5x"):
        with pytest.raises(SystemExit):
            mod.points(bad)


def test_each_point_is_a_valid_kernel_config(mod):
    from dataclasses import replace

    from xstage.hw.attention.config import AttentionConfig

    base = AttentionConfig(16384, 3, 128, 8, block_n=128, num_stages=3, tma=True, store_cache=".wt",
                           stagger=True, split_tail=True)
    for M, h, d, bn in mod.points("20480:3:128:64,32768:3:128:64,40960:3:128:64,36864,30720:3:64"):
        c = replace(base, seq_len=M, heads=h, head_dim=d, block_n=bn)
        assert c.block_n == bn and c.seq_len // c.block_n == M // bn
