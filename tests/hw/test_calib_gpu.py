"""The microbenchmark on a real GPU (marker ``gpu``; skipped without CuPy and a CUDA device).

On a GPU machine: ``pytest -m gpu tests/hw/test_calib_gpu.py -q`` (benchmarks/gpu/calibrate.sh runs
the same checks through the self-test and the calibration CLI).
"""

import shutil
import subprocess
from importlib import resources

import numpy as np
import pytest


def test_kernel_source_compiles_for_sm90(tmp_path):
    """The CUDA source compiles for sm_90 with nvcc where nvcc exists (no GPU needed)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not installed")
    src = resources.files("xstage.hw.microbench") / "microbench.cu"
    run = subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-o", str(tmp_path / "mb.cubin"), str(src)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "mb.cubin").stat().st_size > 0


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["local", "host"])
def test_selftest_on_gpu(gpu, target):
    from xstage.hw.microbench.selftest import selftest
    out = selftest(target, small=True)
    assert out["timer"]["tick_ns"] > 0 and out["timer"]["sm_clock_GHz"] > 0.3
    assert all(r["T_iss_us"] > 0 for r in out["runs"])
    if target == "host":
        assert "pattern check failed" in out["corruption_caught"]


@pytest.mark.gpu
def test_periodic_and_isolated_records_on_gpu(gpu):
    from xstage.hw.microbench.runner import BurstSpec, Microbench, summarize_run
    from xstage.hw.common.targets import open_target
    bench = Microbench(open_target("host", 8 << 20))
    try:
        frame, info = bench.run(BurstSpec(8, 16384, 0.0, bursts=8, trials=2), cpu_verify=True)
        assert info["cpu_verified"] and len(frame) == 8 * 8 * 2 and frame["sm"].nunique() == 8
        assert (frame["issue(us)"] > 0).all() and np.isfinite(frame["period(us)"].dropna()).all()
        iso, _ = bench.run(BurstSpec(8, 16384, 0.0, mode="isolated", bursts=4, trials=1), cpu_verify=True)
        s = summarize_run(iso)
        assert s["fence(us)"] >= s["T_iss(us)"] > 0   # drained after issued
    finally:
        bench.close()


@pytest.mark.gpu
def test_quick_calibration_on_gpu(gpu, tmp_path):
    from xstage.cli import main
    from xstage.sim.platform import Platform
    assert main(["calibrate", "--target", "local", "--out", str(tmp_path), "--quick", "--no-copy"]) == 0
    plat = Platform.load(tmp_path / "platform.json")
    assert plat.drain_rate_GBps > 0 and plat.target == "local"
