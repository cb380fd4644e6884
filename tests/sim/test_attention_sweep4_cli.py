"""``benchmarks/gpu/attention_triton_sweep4.py``'s points and interleaved order (CPU; the sweep itself runs on a GPU)."""

import importlib.util
import sys
from pathlib import Path

import pytest

GPU = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


@pytest.fixture(scope="module")
def mod():
    sys.path.insert(0, str(GPU))
    spec = importlib.util.spec_from_file_location("attention_triton_sweep4", GPU / "attention_triton_sweep4.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_points_default_heads_and_head_dim(mod):
    assert mod.points("57344, 65536:3:64,131072:2:64,8192:6") == [(57344, 3, 128), (65536, 3, 64), (131072, 2, 64),
                                                                   (8192, 6, 128)]
    for bad in ("57344:3:64:1", "5x", "1:-2"):
        with pytest.raises(SystemExit):
            mod.points(bad)


def test_every_repeat_runs_every_point_in_a_rotated_order(mod):
    pts = [1, 2, 3, 4, 5]
    orders = [mod.order(pts, r) for r in range(3)]
    assert orders == [[1, 2, 3, 4, 5], [2, 3, 4, 5, 1], [3, 4, 5, 1, 2]]
    assert all(sorted(o) == pts for o in orders)
    assert len({o[0] for o in orders}) == 3                               # no point always first
