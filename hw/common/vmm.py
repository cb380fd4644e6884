"""Memory the GPU addresses that torch's allocator did not make, as CUDA tensors: host-mapped pinned
buffers, and one CUDA VMM virtual range whose chunks live in different places.

Why: a kernel that takes one output tensor with strides (FA4's ``out=``, a GEMM's D) can write an
All-to-All's receive layout directly if all W receive buffers sit in ONE virtual range at a uniform
stride. On W GPUs the range maps the peers' exported allocations (``cuMemImportFromShareableHandle`` +
``cuMemMap`` at ``va + j·size``: ``vmm_peer.PeerRange``, descriptors exchanged by ``vmm_fds``); on one
GPU (W ranks emulated) ``MixedRange`` maps this rank's chunk to device memory and the others to host
memory (``cuMemCreate`` with a HOST or HOST_NUMA location), so device stores to the remote chunks cross
PCIe as posted writes, as remote stores would. Both: ``.tensor`` (1-D over the range), ``.view(shape,
strides)``, ``.free()``.

Driver calls through ``cuda.bindings.driver`` (cuda-python); each returns ``(CUresult, value…)``.
"""

import math

from xstage.hw.common.hostmap import _cupy_runtime, device_pointer

_ATTRS = ("CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
          "CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
          "CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", "CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID")


class _CudaArray:
    """A minimal ``__cuda_array_interface__`` (v2) over ``nbytes`` at ``ptr`` (int16 elements)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes // 2,), "typestr": "<i2", "data": (int(ptr), False),
                                         "version": 2, "strides": None}


def tensor_over(ptr: int, nbytes: int, dtype, device_index: int = 0):
    """A 1-D CUDA tensor of ``dtype`` over memory the GPU addresses at ``ptr`` (not owned), and how it was made.

    ``torch.as_tensor`` on a ``__cuda_array_interface__`` asks ``cudaPointerGetAttributes`` for the device;
    where that refuses the pointer (a VMM range that starts in host memory, say), cupy's DLPack export,
    which names the device itself, is tried. Either way the tensor must alias ``ptr`` (checked)."""
    import torch

    errors = []
    try:
        t = torch.as_tensor(_CudaArray(ptr, nbytes), device=f"cuda:{device_index}")
        if t.data_ptr() == int(ptr):
            return t.view(dtype), "cuda_array_interface"
        errors.append(f"as_tensor copied ({t.data_ptr():#x} != {int(ptr):#x})")
    except Exception as err:  # noqa: BLE001 - try the next way
        errors.append(f"as_tensor: {err!r}")
    try:
        import cupy

        mem = cupy.cuda.UnownedMemory(int(ptr), nbytes, None, device_index)
        arr = cupy.ndarray((nbytes // 2,), dtype=cupy.int16, memptr=cupy.cuda.MemoryPointer(mem, 0))
        t = torch.from_dlpack(arr)
        if t.data_ptr() == int(ptr) and t.is_cuda:
            return t.view(dtype), "cupy_dlpack"
        errors.append(f"dlpack gave {t.data_ptr():#x}")
    except Exception as err:  # noqa: BLE001
        errors.append(f"cupy: {err!r}")
    raise RuntimeError(f"cannot wrap {int(ptr):#x} as a CUDA tensor: " + "; ".join(errors))


def strided_view(flat, shape, strides, dtype=None):
    """``flat`` (a 1-D tensor, offset 0) as ``shape`` with element ``strides`` of ``dtype`` (default: flat's),
    refused (InputError) where an element would lie outside it: the one strided output a kernel writes."""
    from xstage.errors import InputError

    if dtype is not None and dtype != flat.dtype:
        flat = flat.view(dtype)
    shape, strides = tuple(int(n) for n in shape), tuple(int(s) for s in strides)
    if len(shape) != len(strides) or any(n < 1 for n in shape) or any(s < 0 for s in strides):
        raise InputError("shape/strides", (shape, strides), "must pair up, sizes >= 1, strides >= 0")
    last = sum((n - 1) * s for n, s in zip(shape, strides))
    if last >= flat.numel():
        raise InputError("shape/strides", (shape, strides), f"reach element {last}; the range holds {flat.numel()}")
    return flat.as_strided(shape, strides, 0)


class HostMapped:
    """Pinned, portable, device-mapped host memory of ``nbytes`` and a CUDA tensor over it (``.tensor``)."""

    def __init__(self, nbytes: int, dtype):
        import torch

        self.nbytes, self._pinned = nbytes, None
        rt = _cupy_runtime()
        if rt is not None:
            self.ptr = int(rt.hostAlloc(nbytes, rt.hostAllocMapped | rt.hostAllocPortable))
            self.how = "cupy hostAlloc(mapped|portable)"
        else:  # cudaHostAlloc through torch; under UVA mapped, device pointer == host pointer
            self._pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            self.ptr = self._pinned.data_ptr()
            self.how = "torch pin_memory"
        self.dptr = device_pointer(self.ptr)
        self.tensor, self.wrap = tensor_over(self.dptr, nbytes, dtype)

    def free(self) -> None:
        rt = _cupy_runtime()
        self.tensor = None
        if self._pinned is None and rt is not None and self.ptr:
            rt.freeHost(self.ptr)
        self._pinned, self.ptr = None, 0


def _ok(cu, res):
    if res[0] != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver error {res[0]}")
    return res[1] if len(res) == 2 else res[1:]


def device_attributes(dev: int = 0) -> dict:
    """The VMM-related device attributes (a refused one as its error text)."""
    from cuda.bindings import driver as cu

    _ok(cu, cu.cuInit(0))
    out = {}
    for name in _ATTRS:
        attr = getattr(cu.CUdevice_attribute, name, None)
        if attr is None:
            continue
        try:
            out[name] = int(_ok(cu, cu.cuDeviceGetAttribute(attr, dev)))
        except RuntimeError as err:
            out[name] = str(err)
    return out


class MixedRange:
    """One reserved virtual range of ``world`` chunks of ``chunk_bytes``: chunk ``local`` backed by device
    memory, the others by host memory, all mapped read-write for device ``dev``; ``.tensor`` spans it.

    Raises RuntimeError (naming the driver's refusal) where host-located VMM is not available."""

    def __init__(self, chunk_bytes: int, world: int, local: int, dtype, dev: int = 0):
        from cuda.bindings import driver as cu

        self.cu, self.va, self.handles, self.mapped = cu, 0, [], []
        self.attrs = device_attributes(dev)
        on_dev = self._prop(cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE, dev)
        on_host, self.host_kind, errors = None, None, []
        for name in ("CU_MEM_LOCATION_TYPE_HOST", "CU_MEM_LOCATION_TYPE_HOST_NUMA"):
            kind = getattr(cu.CUmemLocationType, name, None)
            if kind is None:
                errors.append(f"{name} not in cuda.bindings")
                continue
            try:
                prop = self._prop(kind, 0)
                self._granularity(prop)  # a refused location fails here
                on_host, self.host_kind = prop, name
                break
            except RuntimeError as err:
                errors.append(f"{name}: {err}")
        if on_host is None:
            raise RuntimeError("no host location for cuMemCreate: " + "; ".join(errors))
        self.granularity = math.lcm(self._granularity(on_dev), self._granularity(on_host))
        if chunk_bytes % self.granularity:
            raise RuntimeError(f"chunk of {chunk_bytes} B is not a multiple of the VMM granularity "
                               f"{self.granularity} B")
        self.chunk_bytes, self.total = chunk_bytes, chunk_bytes * world
        self.va = int(_ok(cu, cu.cuMemAddressReserve(self.total, self.granularity, 0, 0)))
        try:
            access = cu.CUmemAccessDesc()
            access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = dev
            access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            for j in range(world):
                handle = _ok(cu, cu.cuMemCreate(chunk_bytes, on_dev if j == local else on_host, 0))
                self.handles.append(handle)
                addr = self.va + j * chunk_bytes
                _ok(cu, cu.cuMemMap(addr, chunk_bytes, 0, handle, 0))
                self.mapped.append(addr)
                _ok(cu, cu.cuMemSetAccess(addr, chunk_bytes, [access], 1))
            self.tensor, self.wrap = tensor_over(self.va, self.total, dtype, dev)
        except Exception:
            self.free()
            raise

    def view(self, shape, strides, dtype=None):
        """A strided tensor (element strides, offset 0) over the range (``strided_view``)."""
        return strided_view(self.tensor, shape, strides, dtype)

    def _prop(self, loc_type, loc_id):
        cu = self.cu
        p = cu.CUmemAllocationProp()
        p.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        p.location.type = loc_type
        p.location.id = loc_id
        p.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        return p

    def _granularity(self, prop) -> int:
        cu = self.cu
        flag = cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
        return int(_ok(cu, cu.cuMemGetAllocationGranularity(prop, flag)))

    def free(self) -> None:
        cu = self.cu
        self.tensor = None
        for addr in reversed(self.mapped):
            cu.cuMemUnmap(addr, self.chunk_bytes)
        for handle in reversed(self.handles):
            cu.cuMemRelease(handle)
        if self.va:
            cu.cuMemAddressFree(self.va, self.total)
        self.mapped, self.handles, self.va = [], [], 0
