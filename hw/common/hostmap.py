"""Host-mapped pinned buffers that a GPU kernel can store into, and copy-engine 2-D copies.

On one GPU the W-1 remote destinations of an All-to-All are emulated by pinned host memory:
device stores to it travel over PCIe and are posted, exactly like remote stores to a peer.

Pointers. ``torch.empty(..., pin_memory=True)`` allocates through ``cudaHostAlloc``. With unified
virtual addressing (every 64-bit Linux CUDA system, the H200 included) such memory is mapped into
the device address space and its device pointer equals its host pointer, so ``tensor.data_ptr()``
can go into a Triton kernel's pointer table. ``device_pointer`` asks the CUDA runtime anyway
(``cudaPointerGetAttributes`` through cupy, else ``cudaHostGetDevicePointer`` through the
``libcudart`` that torch loaded) and returns what it says; ``check_mapping`` reports whether the two
addresses are equal, and the GPU script prints it.
"""

import ctypes
import functools

CUDA_MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: direction inferred from the (unified) addresses


@functools.lru_cache(maxsize=1)
def _cupy_runtime():
    try:
        from cupy.cuda import runtime
    except ImportError:
        return None
    return runtime


@functools.lru_cache(maxsize=1)
def _libcudart():
    import torch

    torch.cuda.init()
    with open("/proc/self/maps") as maps:
        libs = sorted({line.split()[-1] for line in maps if "libcudart.so" in line})
    if not libs:
        raise RuntimeError("no CUDA runtime found: install cupy or use a torch build that loads libcudart")
    return ctypes.CDLL(libs[0])


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed with cudaError {rc}")


def device_pointer(host_ptr: int) -> int:
    """The device address of the pinned host memory at ``host_ptr``."""
    rt = _cupy_runtime()
    if rt is not None:
        try:
            attrs = rt.pointerGetAttributes(host_ptr)
            if attrs.devicePointer:
                return int(attrs.devicePointer)
        except Exception:  # noqa: BLE001 - fall through to the runtime library itself
            pass
    out = ctypes.c_void_p()
    _check(_libcudart().cudaHostGetDevicePointer(ctypes.byref(out), ctypes.c_void_p(host_ptr), 0),
           "cudaHostGetDevicePointer")
    return int(out.value)


def pinned_buffer(shape, dtype):
    """A pinned, host-mapped tensor and its device pointer: (tensor, device_ptr)."""
    import torch

    t = torch.empty(shape, dtype=dtype, pin_memory=True)
    return t, device_pointer(t.data_ptr())


def check_mapping(nbytes: int = 1 << 20) -> dict:
    """Allocate a pinned buffer; report whether its device pointer equals its host pointer."""
    import torch

    t, dptr = pinned_buffer((nbytes,), torch.uint8)
    return {"host_ptr": hex(t.data_ptr()), "device_ptr": hex(dptr), "uva_identity": dptr == t.data_ptr(),
            "cupy": _cupy_runtime() is not None}


def memcpy2d_async(dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, stream: int) -> None:
    """cudaMemcpy2DAsync (cudaMemcpyDefault) on ``stream``: ``height`` rows of ``width`` bytes."""
    rt = _cupy_runtime()
    if rt is not None:
        rt.memcpy2DAsync(dst, dpitch, src, spitch, width, height, CUDA_MEMCPY_DEFAULT, stream)
        return
    size_t = ctypes.c_size_t
    _check(_libcudart().cudaMemcpy2DAsync(ctypes.c_void_p(dst), size_t(dpitch), ctypes.c_void_p(src),
                                          size_t(spitch), size_t(width), size_t(height),
                                          ctypes.c_int(CUDA_MEMCPY_DEFAULT), ctypes.c_void_p(stream)),
           "cudaMemcpy2DAsync")
