"""The W-GPU receive range: one virtual range on each rank over all W ranks' receive chunks (CUDA VMM).

Each rank ``cuMemCreate``s its own chunk (device memory, POSIX-file-descriptor shareable, size rounded up
to the allocation granularity) and exports it as a file descriptor; the W ranks exchange descriptors
(``vmm_fds.exchange_fds``: Unix sockets, SCM_RIGHTS); each rank imports every peer's
(``cuMemImportFromShareableHandle``), reserves one range of W·stride, maps chunk j at ``va + j·stride``
(its own chunk by its own handle) and makes it read-write for its device. ``.tensor`` (1-D, like
``MixedRange.tensor``) and ``.view(shape, strides)`` span all W chunks, so a kernel taking one strided
output (FA4's ``out=``, a GEMM's D) writes every rank's receive buffer: the All-to-All is its epilogue.
The uniform ``[M, W·H, d]`` view needs ``chunk_bytes`` a multiple of the granularity (stride =
chunk_bytes: 2 MiB on the H200, true for M a multiple of 8K at H = 3, d = 128); otherwise chunks sit
``chunk_stride`` apart and the chunk-major view ``(W, M/W, H, d)`` with that batch stride still works.

``PeerRange(chunk_bytes, world, rank, dtype, dev, exchange)``: ``exchange(fd) -> [W fds]`` (index = rank)
is the collective step; ``peer_alloc(store)`` builds ``Fa4Case``'s ``vmm_alloc`` from a torch.distributed
store for one process per GPU (torchrun). ``LocalPeers`` emulates the W−1 other ranks in this process on
one GPU (each its own ``cuMemCreate`` + export, each descriptor imported as a peer's is): the same driver
path, which the gpu-marked test checks. Needs P2P access between the GPUs (NVLink) on W GPUs; fabric
handles instead of descriptors only across nodes.
"""

import itertools
import os

from xstage.errors import InputError, require_int
from xstage.hw.common.vmm import _ok, device_attributes, strided_view, tensor_over
from xstage.hw.common.vmm_fds import exchange_fds, store_prefix


def _call(cu, what: str, res):
    try:
        return _ok(cu, res)
    except RuntimeError as err:
        raise RuntimeError(f"{what}: {err}") from None


def _driver():
    from cuda.bindings import driver as cu

    _call(cu, "cuInit", cu.cuInit(0))
    return cu


def _prop(cu, dev: int):
    p = cu.CUmemAllocationProp()
    p.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    p.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    p.location.id = dev
    p.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    return p


def _posix(cu):
    return cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


_POSIX_ATTR = "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED"


def posix_fd_supported(cu, dev: int):
    """The device's POSIX-file-descriptor handle attribute (1 / 0), or None where it cannot be read."""
    attr = getattr(getattr(cu, "CUdevice_attribute", None), _POSIX_ATTR, None)
    if attr is None:
        return None
    try:
        return int(_ok(cu, cu.cuDeviceGetAttribute(attr, dev)))
    except RuntimeError:
        return None


def granularity(cu, dev: int) -> int:
    flag = cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
    return int(_call(cu, "cuMemGetAllocationGranularity", cu.cuMemGetAllocationGranularity(_prop(cu, dev), flag)))


def _map_rw(cu, va: int, nbytes: int, handle, dev: int, what: str) -> None:
    _call(cu, f"cuMemMap ({what})", cu.cuMemMap(va, nbytes, 0, handle, 0))
    access = cu.CUmemAccessDesc()
    access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = dev
    access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    try:
        _call(cu, f"cuMemSetAccess ({what})", cu.cuMemSetAccess(va, nbytes, [access], 1))
    except RuntimeError:
        cu.cuMemUnmap(va, nbytes)
        raise


class _Context:
    """The device's primary context (torch's, the runtime's) retained and made current on this thread, so a
    rank may build its range from any thread; ``close`` releases the retain (the runtime keeps its own)."""

    def __init__(self, cu, dev: int):
        self.cu, self.dev, self.retained = cu, dev, False
        pctx = _call(cu, "cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(cu.CUdevice(dev)))
        self.retained = True
        try:
            _call(cu, "cuCtxSetCurrent", cu.cuCtxSetCurrent(pctx))
        except RuntimeError:
            self.close()
            raise

    def close(self) -> None:
        if self.retained:
            self.cu.cuDevicePrimaryCtxRelease(self.cu.CUdevice(self.dev))
            self.retained = False


def _check(chunk_bytes, world, rank):
    chunk_bytes = require_int("chunk_bytes", chunk_bytes, minimum=1)
    world = require_int("world", world, minimum=1)
    rank = require_int("rank", rank, minimum=0)
    if rank >= world:
        raise InputError("rank", rank, f"must be < world ({world})")
    return chunk_bytes, world, rank


class PeerRange:
    """``world`` chunks of ``chunk_bytes`` (each rounded up to ``chunk_stride``), chunk j = rank j's device
    memory, mapped at ``va + j·chunk_stride`` read-write for ``dev``; ``.tensor`` (1-D ``dtype``) spans them.

    ``exchange(fd)``: the W ranks' descriptors (own at ``rank``; the caller's to close are closed here); None
    only for world 1. Bad input: ``InputError`` (a ValueError) naming the field; a refusal of the driver or
    of the exchange: RuntimeError naming the step."""

    def __init__(self, chunk_bytes: int, world: int, rank: int, dtype, dev: int = 0, exchange=None):
        self.chunk_bytes, self.world, self.rank = _check(chunk_bytes, world, rank)
        if exchange is None and self.world > 1:
            raise InputError("exchange", None, f"must be given for world {self.world} (the peers' descriptors)")
        cu = self.cu = _driver()
        self.dev, self.va, self.mapped, self.handles, self.fds, self.tensor = dev, 0, [], [], [], None
        self.ctx = _Context(cu, dev)
        try:
            self.attrs, self.host_kind = device_attributes(dev), None  # no host chunks: MixedRange's fields
            self.attrs[_POSIX_ATTR] = posix_fd_supported(cu, dev)
            self.granularity = granularity(cu, dev)
            self.chunk_stride = -(-self.chunk_bytes // self.granularity) * self.granularity
            self.total = self.chunk_stride * self.world
            self.own_handle = _call(cu, f"cuMemCreate (own chunk, POSIX fd handles: {self.attrs[_POSIX_ATTR]})",
                                    cu.cuMemCreate(self.chunk_stride, _prop(cu, dev), 0))
            self.handles.append(self.own_handle)
            own_fd = int(_call(cu, "cuMemExportToShareableHandle",
                               cu.cuMemExportToShareableHandle(self.own_handle, _posix(cu), 0)))
            self.fds.append(own_fd)
            peer_fds = list(exchange(own_fd)) if exchange is not None else [os.dup(own_fd)]
            self.fds.extend(peer_fds)
            if len(peer_fds) != self.world:
                raise RuntimeError(f"the exchange gave {len(peer_fds)} descriptors for world {self.world}")
            self.va = int(_call(cu, "cuMemAddressReserve", cu.cuMemAddressReserve(self.total, self.granularity, 0, 0)))
            for j, fd in enumerate(peer_fds):
                handle = self.own_handle
                if j != self.rank:
                    handle = _call(cu, f"cuMemImportFromShareableHandle (rank {j})",
                                   cu.cuMemImportFromShareableHandle(fd, _posix(cu)))
                    self.handles.append(handle)
                addr = self.va + j * self.chunk_stride
                _map_rw(cu, addr, self.chunk_stride, handle, dev, f"rank {j}'s chunk")
                self.mapped.append(addr)
            self._close_fds()  # the imported handles hold the memory now
            self.tensor, self.wrap = tensor_over(self.va, self.total, dtype, dev)
        except Exception:
            self.free()
            raise

    def view(self, shape, strides, dtype=None):
        """A strided tensor (element strides, offset 0) over the range; refused if it reaches past the end."""
        return strided_view(self.tensor, shape, strides, dtype)

    def chunk(self, j: int):
        """Rank j's chunk (``chunk_bytes``) as a 1-D tensor of the range's dtype."""
        n = self.chunk_bytes // self.tensor.element_size()
        start = j * self.chunk_stride // self.tensor.element_size()
        return self.tensor[start:start + n]

    def _close_fds(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def free(self) -> None:
        """Unmap every chunk, release every handle (own and imported), free the range, close what is open."""
        cu, self.tensor = self.cu, None
        for addr in reversed(self.mapped):
            cu.cuMemUnmap(addr, self.chunk_stride)
        for handle in reversed(self.handles):
            cu.cuMemRelease(handle)
        if self.va:
            cu.cuMemAddressFree(self.va, self.total)
        self._close_fds()
        self.mapped, self.handles, self.va = [], [], 0
        self.ctx.close()


class ChunkMapping:
    """One allocation handle mapped alone at its own reservation (a rank's own view of its buffer)."""

    def __init__(self, cu, handle, nbytes: int, dev: int, dtype):
        self.cu, self.nbytes, self.va = cu, nbytes, 0
        align = granularity(cu, dev)
        self.va = int(_call(cu, "cuMemAddressReserve", cu.cuMemAddressReserve(nbytes, align, 0, 0)))
        try:
            _map_rw(cu, self.va, nbytes, handle, dev, "own mapping")
        except RuntimeError:
            cu.cuMemAddressFree(self.va, nbytes)
            raise
        self.tensor, _ = tensor_over(self.va, nbytes, dtype, dev)

    def free(self) -> None:
        self.tensor = None
        if self.va:
            self.cu.cuMemUnmap(self.va, self.nbytes)
            self.cu.cuMemAddressFree(self.va, self.nbytes)
        self.va = 0


class LocalPeers:
    """W−1 emulated peers of ``rank`` on one GPU: each a separate ``cuMemCreate`` (POSIX-fd shareable) of
    ``chunk_stride`` bytes, exported, and mapped on its own (``.tensor(j)``: peer j's view of its buffer).
    ``.exchange(fd)`` is ``PeerRange``'s exchange: duplicates of the peers' descriptors, ``fd``'s at ``rank``."""

    def __init__(self, world: int, rank: int, chunk_stride: int, dtype, dev: int = 0):
        _, self.world, self.rank = _check(chunk_stride, world, rank)
        cu = self.cu = _driver()
        self.ctx, self.handles, self.fds, self.maps = _Context(cu, dev), {}, {}, {}
        try:
            for j in range(self.world):
                if j == self.rank:
                    continue
                self.handles[j] = _call(cu, f"cuMemCreate (peer {j})", cu.cuMemCreate(chunk_stride, _prop(cu, dev), 0))
                self.fds[j] = int(_call(cu, f"cuMemExportToShareableHandle (peer {j})",
                                        cu.cuMemExportToShareableHandle(self.handles[j], _posix(cu), 0)))
                self.maps[j] = ChunkMapping(cu, self.handles[j], chunk_stride, dev, dtype)
        except Exception:
            self.free()
            raise

    def exchange(self, fd: int) -> list:
        return [os.dup(fd if j == self.rank else self.fds[j]) for j in range(self.world)]

    def tensor(self, j: int):
        return self.maps[j].tensor

    def free(self) -> None:
        for m in self.maps.values():
            m.free()
        for h in self.handles.values():
            self.cu.cuMemRelease(h)
        for fd in self.fds.values():
            os.close(fd)
        self.maps, self.handles, self.fds = {}, {}, {}
        self.ctx.close()


def peer_alloc(store=None, dev=None, timeout_s: float = 60.0, key: str = "xstage-vmm-peer"):
    """``Fa4Case``'s ``vmm_alloc(chunk_bytes, W, rank, dtype)`` on W GPUs, one process per GPU (torchrun): a
    ``PeerRange`` whose descriptors travel over abstract Unix sockets named through ``store`` (a
    torch.distributed store; None: the default group's). Collective: every rank calls the returned function
    in the same order (each call agrees a fresh socket prefix). The W-rank FA4 path it is for::

        rng = peer_alloc()(lay.chunk_bytes, W, rank, torch.bfloat16)         # after init_process_group
        out = fa4_layout.my_heads(fa4_layout.receive_view(rng.tensor, lay), lay)  # (1, M, H, d) over all ranks
        dist.barrier(); fa(q, k, v, out); torch.cuda.synchronize(); dist.barrier()  # then D_rank is complete

    (the barrier after the synchronize: a rank's own chunk is complete once every peer's kernel is done)."""
    calls = itertools.count()

    def alloc(chunk_bytes, world, rank, dtype):
        import torch

        nonlocal store
        if store is None:
            from torch.distributed import distributed_c10d

            store = distributed_c10d._get_default_store()
        device = torch.cuda.current_device() if dev is None else dev
        prefix = store_prefix(store, rank, f"{key}-{next(calls)}", timeout_s)
        return PeerRange(chunk_bytes, world, rank, dtype, device,
                         exchange=lambda fd: exchange_fds(fd, rank, world, prefix, timeout_s))

    return alloc
