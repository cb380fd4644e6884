"""Rule 20: the device script's page-placement summary on exact frame lists (``benchmarks/gpu/fa_rule20.py``; no GPU)."""

import importlib.util
import sys

import numpy as np
import pytest

from .bench_scripts import BENCHMARKS


@pytest.fixture(scope="module")
def G():
    sys.path.insert(0, str(BENCHMARKS / "gpu"))
    spec = importlib.util.spec_from_file_location("fa_rule20_gpu", BENCHMARKS / "gpu" / "fa_rule20.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pfn_runs_counts_physically_consecutive_frames(G):
    # runs 10-12, 40-41 and 7
    assert G.pfn_runs([10, 11, 12, 40, 41, 7]) == {"pages": 6, "readable": 6, "runs": 3, "longest_run": 3,
                                                   "share_in_2M_runs": 0.0}
    # one 2 MiB run (512 pages) and one stray page
    r = G.pfn_runs(list(range(1000, 1512)) + [5])
    assert (r["runs"], r["longest_run"], r["share_in_2M_runs"]) == (2, 512, 512 / 513)


def test_pfn_runs_unreadable_frames(G):
    # frame numbers read as zero (not root): nothing to say about placement
    assert G.pfn_runs([0, 0, 0])["runs"] is None
    # a zero frame inside breaks the run on both sides
    assert G.pfn_runs([3, 0, 5])["runs"] == 3


def test_page_runs_reads_this_process(G, tmp_path):
    a = np.ones(3 * G.PAGE, dtype=np.uint8)
    r = G.page_runs(a.ctypes.data, a.nbytes)
    assert r["pages"] in (3, 4)                 # the array may straddle one more page
    fake = tmp_path / "pagemap"                 # a pagemap of four present pages at frames 8, 9, 10, 20
    entries = np.array([8, 9, 10, 20], dtype=np.uint64) | np.uint64(1 << 63)
    fake.write_bytes(entries.tobytes())
    assert G.page_runs(0, 4 * G.PAGE, pagemap=str(fake))["runs"] == 2
    assert G.page_runs(0, 4 * G.PAGE, pagemap=str(tmp_path / "missing"))["readable"] == 0
