"""Fixtures of the hw tests: a GPU test skips, saying so, where this machine has no CUDA GPU to run it on."""

import shutil
from pathlib import Path

import pytest

COMMITTED_HOST = Path(__file__).resolve().parents[2] / "data" / "calibration" / "h200-pcie-host"


@pytest.fixture(scope="module")
def gpu():
    """CuPy on a CUDA device; else skip: the test needs a GPU (the reason says what is missing)."""
    try:
        import cupy
    except ImportError:
        pytest.skip("needs a CUDA GPU (no CuPy here, so no device to run on)")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("needs a CUDA GPU (none found)")
    except Exception as err:  # noqa: BLE001 - CUDARuntimeError without a driver
        pytest.skip(f"needs a CUDA GPU (none found: {type(err).__name__})")
    return cupy


@pytest.fixture
def nvshmem_gpu(gpu):
    """A CUDA GPU with torch and nvshmem4py, which the NVSHMEM GPU tests launch with."""
    torch = pytest.importorskip("torch", reason="the NVSHMEM GPU tests need torch on the CUDA GPU")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch sees none)")
    try:
        import nvshmem.core  # noqa: F401
    except ImportError:
        pytest.skip("needs a CUDA GPU with nvshmem4py (not installed here)")


@pytest.fixture()
def data(tmp_path):
    """A records folder holding a copy of the committed h200-pcie-host calibration (tests write beside it)."""
    assert (COMMITTED_HOST / "points.parquet").exists(), f"the committed calibration is missing: {COMMITTED_HOST}"
    shutil.copytree(COMMITTED_HOST, tmp_path / "data" / "calibration" / "h200-pcie-host")
    return tmp_path / "data"
