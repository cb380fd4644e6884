"""The store kernel and the put path's helpers share one header (``xstage_sync.cuh``): the sources NVRTC
gets have it inlined once, define each helper once, and nothing else is included."""

import re
from pathlib import Path

import pytest

from xstage.hw.microbench.put_kernel import helpers_path
from xstage.hw.microbench.runner import cuda_source, kernel_source


@pytest.mark.parametrize("name", ["microbench.cu", "put_helpers.cu"])
def test_header_inlined_once(name):
    src = cuda_source(name)
    assert '#include "' not in src
    for helper in ("u64 gtimer()", "bool grid_barrier(", "bool spin_until(", "u32 sm_id()"):
        assert src.count(helper) == 1, helper
    assert len(re.findall(r"#define MAX_SPINS", src)) == 1


def test_store_kernel_keeps_its_entry_points():
    src = kernel_source()
    for kernel in ("burst_kernel", "burst_kernel_multi", "burst_kernel_end_fence", "burst_kernel_multi_end_fence",
                   "fill_zero", "verify_pattern", "verify_rows", "flip_bits",
                   "timer_probe"):  # what runner.Microbench gets from the module
        assert len(re.findall(rf"\b{kernel}\(", src)) == 1, kernel
    assert "pattern_word" in src


def test_put_helpers_file_is_the_inlined_source():
    path = Path(helpers_path())
    assert path.read_text() == cuda_source("put_helpers.cu")
    assert path.name == "put_helpers.cu" and helpers_path() == str(path)  # written once per process
    for fn in ("xs_gtimer", "xs_clock", "xs_smid", "xs_grid_barrier", "xs_spin_until", "xs_spin_cycles"):
        assert f'extern "C" __device__ int {fn}(' in path.read_text()


def test_the_end_fence_is_a_template_argument_not_a_runtime_flag():
    """The kernels without the end fence compile to the code they had before it (a run-time flag moved their issue
    spans by a timer tick or two): run_bursts takes it as a template argument and the mode is not masked."""
    src = kernel_source()
    assert "template <bool kEndFence>" in src and "if (kEndFence && mode != 1" in src
    assert "END_FENCE" not in src and "mode &=" not in src
    loop = src[src.index("for (u32 b = 0; b < n_bursts; ++b)"):src.index("if (kEndFence && mode != 1")]
    assert "kEndFence" not in loop          # the burst loop is one source for both builds
    for kernel, fence in (("burst_kernel", "false"), ("burst_kernel_end_fence", "true"),
                          ("burst_kernel_multi", "false"), ("burst_kernel_multi_end_fence", "true")):
        body = src[src.index(f" {kernel}("):]
        assert f"<{fence}>(" in body[:body.index("}")], kernel
