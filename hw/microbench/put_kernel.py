"""The NVSHMEM device-put burst kernel: Numba-CUDA with nvshmem4py's device bindings (GPU only).

The store kernel's protocol (``microbench.cu``, ``runner.py``: modes, gaps, barriers, the six u64 records
per burst) with one change: instead of 16-byte stores through a peer pointer, each producer CTA issues its
B bytes with one CTA-wide NVSHMEM put from a local source buffer, ``nvshmemx_uint32_put_nbi_block`` (issue
``put-nbi``) or ``nvshmemx_uint32_put_block`` (issue ``put``), to the symmetric destination on PE ``pe``.
The issue end [1] is taken after the put returned and a ``__syncthreads`` (accepted, not completed, as on
the store path); every thread calls ``nvshmem_quiet`` after its last burst (and, in isolated mode, after
every burst instead of ``__threadfence_system``), so the kernel ends with its puts complete.

The timer reads, the bounded grid barrier and the bounded spins are ``put_helpers.cu`` (NVRTC, linked by
Numba), wrappers of the store kernel's own (``xstage_sync.cuh``, shared by both sources). nvshmem4py's bindings bring their own NVSHMEM shims (C++ that includes
``nvshmem.h``, compiled by NVRTC) and initialise the module's NVSHMEM device state when it loads, so NVSHMEM
must be initialised before the first launch. Every import here happens inside `build` (one compile per
process, eager, explicit signature).

`prepare_nvrtc` makes the NVSHMEM 3.4 headers (the GPU image's nvidia-nvshmem-cu13 3.4.5) compile under NVRTC,
which they do not as shipped (seen on CPU with NVRTC 13, 2026-12-01): the IBGDA transport's device header
needs ``infiniband/mlx5dv.h`` (left out, as NVSHMEM's own bitcode device library leaves it out: the P2P path
needs no IBGDA), ``reduce.cuh`` uses ``std::is_integral`` without ``<type_traits>`` (the ``cuda::std`` ones
are named in ``std``), and ``nvshmem_tensor.h`` has a constructor without ``__device__`` (NVRTC's
``-default-device``, added to Numba's NVRTC options).
"""

import functools
import os
import tempfile
from functools import lru_cache

ENTRY_POINT = """// xstage: nvshmem4py's entry_point.h for NVRTC with the NVSHMEM 3.4 headers (put_kernel.prepare_nvrtc)
#define __NVSHMEM_NUMBA_SUPPORT__
#include <non_abi/nvshmem_build_options.h>
#undef NVSHMEM_IBGDA_SUPPORT
#include <cuda/std/type_traits>
namespace std { using cuda::std::is_integral; using cuda::std::is_signed; using cuda::std::is_unsigned; }
#include <nvshmem.h>
#include <nvshmemx.h>
"""

# (name, C signature in Numba's terms) of put_helpers.cu
_HELPERS = (("xs_gtimer", "uint64()"), ("xs_clock", "uint64()"), ("xs_smid", "uint32()"),
            ("xs_grid_barrier", "int32(uint64, uint64, uint64, uint64, uint64)"),
            ("xs_spin_until", "int32(uint64, uint64)"), ("xs_spin_cycles", "int32(uint64)"))
SIGNATURE = ("void(uint64[::1], int32[::1], uint32[::1], uint32[::1], uint32, uint64, uint64, uint64, uint32, "
             "uint32, uint32, uint32, uint32, uint32, uint64, uint64, uint64, uint32[::1], uint64[:, :, ::1], "
             "uint32[::1], float32[::1], int32[::1])")


@lru_cache(maxsize=1)
def helpers_path() -> str:
    """``put_helpers.cu`` with the shared helpers (``xstage_sync.cuh``) inlined, written once per process
    to a temporary file: Numba links files, and its NVRTC does not search the package folder."""
    from xstage.hw.microbench.runner import cuda_source

    folder = tempfile.mkdtemp(prefix="xstage-put-helpers-")
    path = os.path.join(folder, "put_helpers.cu")
    with open(path, "w") as fh:
        fh.write(cuda_source("put_helpers.cu"))
    return path


def numpy_compat() -> None:
    """Numba-CUDA 0.30.4 (the newest, and the GPU image's) registers an overload of ``np.row_stack`` when it
    loads its CUDA target; NumPy 2.5 (the image has 2.5.2) removed that alias of ``vstack``, so the import
    fails (seen on the H200, 2026-12-01). Put the alias back as a function of its own (not ``np.vstack``
    itself, so no second overload lands on ``vstack``) before anything imports ``numba.cuda``."""
    import numpy as np
    if not hasattr(np, "row_stack"):
        def row_stack(tup, *, dtype=None, casting="same_kind"):
            return np.vstack(tup, dtype=dtype, casting=casting)
        np.row_stack = row_stack


@lru_cache(maxsize=1)
def prepare_nvrtc() -> dict:
    """Once per process, after importing the bindings: our ``entry_point.h`` first on Numba's NVRTC search
    path, and ``-default-device`` in Numba's NVRTC options. Returns what was done (recorded with the run)."""
    numpy_compat()
    from numba import cuda

    import nvshmem.bindings.device.numba  # noqa: F401 - sets CUDA_NVRTC_EXTRA_SEARCH_PATHS
    folder = tempfile.mkdtemp(prefix="xstage-nvshmem-nvrtc-")
    with open(os.path.join(folder, "entry_point.h"), "w") as fh:
        fh.write(ENTRY_POINT)
    cuda.config.CUDA_NVRTC_EXTRA_SEARCH_PATHS = ":".join(
        [folder] + [p for p in (cuda.config.CUDA_NVRTC_EXTRA_SEARCH_PATHS or "").split(":") if p])
    done = {"entry_point": folder, "default_device": False}
    try:
        from numba.cuda.cudadrv import nvrtc
        if hasattr(nvrtc, "ProgramOptions"):
            nvrtc.ProgramOptions = functools.partial(nvrtc.ProgramOptions, device_as_default_execution_space=True)
            done["default_device"] = True
    except ImportError:
        pass
    return done


@lru_cache(maxsize=1)
def build():
    """The compiled kernel (a Numba dispatcher, compiled now for this GPU): `kernel_function` under
    ``cuda.jit(SIGNATURE, link=[put_helpers.cu])``, after `prepare_nvrtc`."""
    from numba import cuda
    prepare_nvrtc()
    return cuda.jit(SIGNATURE, link=[helpers_path()])(kernel_function())


def kernel_function():
    """The kernel's Python function (typed by `SIGNATURE`). Arguments, in order: dst_table (local symmetric
    address of each destination region), pe_of (its PE), dst_of / row_of (per producer), rows, counter_addr,
    err_addr, src_addr, blocking, then the store kernel's words_per_producer ... err (``runner.Microbench.run``)."""
    import numba
    from numba import cuda
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    import nvshmem.bindings.device.numba as nvb

    gtimer, clock, smid, grid_barrier, spin_until, spin_cycles = (cuda.declare_device(n, s) for n, s in _HELPERS)
    u64, i64, i32, f32 = numba.uint64, numba.int64, numba.int32, numba.float32

    @intrinsic
    def u32p(typingctx, addr):
        """A uint64 address as the ``uint32_t *`` nvshmem4py's put bindings take."""
        if addr != types.uint64:
            return None
        sig = types.CPointer(types.uint32)(types.uint64)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
        return sig, codegen

    def put_bursts(dst_table, pe_of, dst_of, row_of, rows, counter_addr, err_addr, src_addr, blocking,
                   words_per_producer, slots, n_bursts, mode, gap_kind, gap_param, settle_ns, timeout_ns,
                   counter, rec, sm_of, sink, err):
        p = i64(cuda.blockIdx.x)
        K = i64(cuda.gridDim.x)
        tid = cuda.threadIdx.x
        nw = i64(words_per_producer) * 4                 # uint32 elements per producer and burst
        d = i64(dst_of[p])
        pe = i32(pe_of[d])
        dst0 = dst_table[d] + u64(4 * i64(row_of[p]) * nw)
        slot_stride = u64(4 * i64(rows) * nw)
        src0 = src_addr + u64(4 * p * nw)                # source layout [burst][producer][nw]
        src_stride = u64(4 * K * nw)
        nslots = i64(slots)
        barriers = i64(0)
        if tid == 0:
            sm_of[p] = smid()
        barriers += 1
        if grid_barrier(counter_addr, u64(K * barriers), timeout_ns, err_addr, u64(1)) == 0:
            return
        a0 = f32(1.0) + f32(tid) * f32(1e-6)
        a1 = a0 + f32(1e-3)
        a2 = a0 + f32(2e-3)
        a3 = a0 + f32(3e-3)
        for b in range(i64(n_bursts)):
            if mode >= 2 and b > 0:
                barriers += 1
                if grid_barrier(counter_addr, u64(K * barriers), timeout_ns, err_addr, u64(1 if mode == 2 else 0)) == 0:
                    return
            t_start = u64(0)
            c_start = u64(0)
            if tid == 0:
                t_start = gtimer()
                c_start = clock()
            cuda.syncthreads()
            dst = dst0 + u64(b % nslots) * slot_stride
            src = src0 + u64(b) * src_stride
            if blocking != 0:
                nvb.uint32_put_block(u32p(dst), u32p(src), u64(nw), pe)
            else:
                nvb.uint32_put_nbi_block(u32p(dst), u32p(src), u64(nw), pe)
            cuda.syncthreads()
            if tid == 0:
                c_end = clock()
                t_end = gtimer()
                rec[p, b, 0] = t_start
                rec[p, b, 1] = t_end
                rec[p, b, 2] = c_start
                rec[p, b, 3] = c_end
                rec[p, b, 4] = u64(0)
            if mode == 1:
                nvb.quiet()                               # this thread's puts are complete
                cuda.syncthreads()
                if tid == 0:
                    rec[p, b, 4] = gtimer()
                barriers += 1
                if grid_barrier(counter_addr, u64(K * barriers), timeout_ns, err_addr, u64(1)) == 0:
                    return
                if settle_ns > u64(0):
                    if spin_until(gtimer() + settle_ns, err_addr) == 0:
                        return
            if gap_kind == 0:
                if gap_param > u64(0):
                    if spin_until(gtimer() + gap_param, err_addr) == 0:
                        return
            elif gap_kind == 1:
                spin_cycles(gap_param)
            else:
                for _k in range(i64(gap_param)):
                    a0 = a0 * f32(1.0000001) + f32(1e-7)
                    a1 = a1 * f32(0.9999999) + f32(1e-7)
                    a2 = a2 * f32(1.0000002) - f32(1e-7)
                    a3 = a3 * f32(0.9999998) + f32(2e-7)
                cuda.syncthreads()
            if tid == 0:
                rec[p, b, 5] = gtimer()
        nvb.quiet()
        if a0 + a1 + a2 + a3 == f32(-1.0):
            sink[p] = a0

    return put_bursts


def allow_dynamic_smem(kernel, nbytes: int) -> bool:
    """Let ``kernel`` launch with ``nbytes`` of dynamic shared memory (the one-CTA-per-SM pad; above 48 KiB
    this needs the function attribute). False when this Numba-CUDA exposes no handle for it."""
    try:
        from cuda.bindings import driver as cu
        from numba.cuda.cudadrv.driver import driver as numba_driver
        func = next(iter(kernel.overloads.values()))._codelibrary.get_cufunc()
        attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        dev = func.device.id
        for call in (lambda: numba_driver.cuKernelSetAttribute(attr, int(nbytes), func.handle, dev) or 0,
                     lambda: cu.cuKernelSetAttribute(attr, int(nbytes), func.handle, dev),
                     lambda: cu.cuFuncSetAttribute(func.handle, attr, int(nbytes))):
            try:
                res = call()
            except Exception:  # noqa: BLE001 - the other handle kind
                continue
            if int((res[0] if isinstance(res, tuple) else res)) == 0:
                return True
    except Exception:  # noqa: BLE001 - an older / newer numba-cuda without these internals
        return False
    return False


class NumbaLaunch:
    """``kernel`` behind CuPy's calling convention (``k(grid, block, args, shared_mem=...)``), so the store
    path's trial loop (``runner.Microbench.run``) launches it unchanged: device arrays pass without Numba's
    stream sync, on the legacy default stream (CuPy's, so the events and the fills stay ordered)."""

    def __init__(self, kernel, pad_bytes: int):
        self.kernel = kernel
        self.pad_bytes = int(pad_bytes) if pad_bytes and allow_dynamic_smem(kernel, pad_bytes) else 0
        self.placement = "shared-memory pad" if self.pad_bytes else "block scheduler (no pad: attribute not set)"

    def __call__(self, grid, block, args, shared_mem=0):
        from numba import cuda
        conv = [cuda.as_cuda_array(a, sync=False) if hasattr(a, "__cuda_array_interface__") else a for a in args]
        self.kernel[grid, block, 0, self.pad_bytes if shared_mem else 0](*conv)
