"""Hardware side: CUDA / Triton kernels, microbenchmarks and launchers.

GPU libraries (torch, cupy, triton, nvshmem4py) are imported inside functions, never at module
import, so everything here can be imported, listed and unit-tested on a machine without a GPU.
"""
