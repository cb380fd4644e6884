"""Fixtures of the hw tests: skip a GPU test where the machine lacks what it needs."""

import pytest


@pytest.fixture
def nvshmem_gpu():
    """Skip unless cupy, torch with a CUDA device and nvshmem4py are all there."""
    pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    try:
        import nvshmem.core  # noqa: F401
    except ImportError:
        pytest.skip("nvshmem4py not installed")
