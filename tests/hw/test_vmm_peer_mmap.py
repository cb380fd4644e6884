"""The gpu-marked ``PeerRange`` checks (``test_vmm_peer_gpu.py``) run on the CPU against a driver that maps
memory for real: each "allocation" a memfd, its export a duplicate descriptor (so an import is the same
memory), ``cuMemAddressReserve`` an inaccessible ``mmap``, ``cuMemMap`` a ``MAP_FIXED`` shared mapping of
the memfd. So the range aliases every chunk's own mapping as on the GPU, and a chunk mapped at the wrong
place, or a write through the wrong view, fails here. Linux only (memfd_create, mmap)."""

import ctypes
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest
torch = pytest.importorskip("torch", reason="needs torch (the range hands out torch tensors); runs in .ci/run's CPU-torch suite")

from xstage.hw.common import vmm_peer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux memfd and mmap")

GRAN = 2 << 20
_spec = importlib.util.spec_from_file_location("vmm_peer_gpu_checks", Path(__file__).with_name("test_vmm_peer_gpu.py"))
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_NONE, _RW, _SHARED, _PRIVATE, _FIXED, _ANON, _NORESERVE = 0, 3, 1, 2, 0x10, 0x20, 0x4000


class _Struct:
    def __init__(self):
        self.location = types.SimpleNamespace(type=None, id=None)


class MmapDriver:
    """The ``cuda.bindings.driver`` calls of ``vmm_peer``, on host memory; ``live``: handle -> bytes."""

    def __init__(self):
        ns = types.SimpleNamespace
        self.CUresult = ns(CUDA_SUCCESS=0)
        self.CUmemAllocationType = ns(CU_MEM_ALLOCATION_TYPE_PINNED=1)
        self.CUmemLocationType = ns(CU_MEM_LOCATION_TYPE_DEVICE=1)
        self.CUmemAllocationHandleType = ns(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR=1)
        self.CUmemAllocationGranularity_flags = ns(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED=1)
        self.CUmemAccess_flags = ns(CU_MEM_ACCESS_FLAGS_PROT_READWRITE=3)
        self.CUmemAllocationProp = self.CUmemAccessDesc = _Struct
        self.CUdevice = int
        self.live, self.reserved, self.contexts = {}, {}, 0

    def cuInit(self, flags):
        return (0,)

    def cuDevicePrimaryCtxRetain(self, dev):
        self.contexts += 1
        return 0, "primary"

    def cuCtxSetCurrent(self, ctx):
        return (0,)

    def cuDevicePrimaryCtxRelease(self, dev):
        self.contexts -= 1
        return (0,)

    def cuMemGetAllocationGranularity(self, prop, flag):
        return 0, GRAN

    def cuMemCreate(self, size, prop, flags):
        fd = os.memfd_create("xstage-vmm-chunk")
        os.ftruncate(fd, size)
        self.live[fd] = size
        return 0, fd

    def cuMemExportToShareableHandle(self, handle, kind, flags):
        return 0, os.dup(handle)

    def cuMemImportFromShareableHandle(self, fd, kind):
        handle = os.dup(fd)
        self.live[handle] = os.fstat(handle).st_size
        return 0, handle

    def cuMemAddressReserve(self, size, align, addr, flags):
        base = _libc.mmap(None, size + align, _NONE, _PRIVATE | _ANON | _NORESERVE, -1, 0)
        va = -(-base // align) * align
        self.reserved[va] = (base, size + align)
        return 0, va

    def cuMemMap(self, va, size, offset, handle, flags):
        if size > self.live[handle]:
            return (1,)
        assert _libc.mmap(va, size, _RW, _SHARED | _FIXED, handle, 0) == va, ctypes.get_errno()
        return (0,)

    def cuMemSetAccess(self, va, size, descs, count):
        return (0,)

    def cuMemUnmap(self, va, size):
        _libc.mmap(va, size, _NONE, _PRIVATE | _ANON | _FIXED | _NORESERVE, -1, 0)
        return (0,)

    def cuMemRelease(self, handle):
        del self.live[handle]
        os.close(handle)
        return (0,)

    def cuMemAddressFree(self, va, size):
        base, n = self.reserved.pop(va)
        _libc.munmap(base, n)
        return (0,)


@pytest.fixture
def host(monkeypatch):
    cu = MmapDriver()

    def tensor_over(ptr, nbytes, dtype, dev=0):
        raw = (ctypes.c_char * nbytes).from_address(ptr)
        return torch.frombuffer(raw, dtype=torch.uint8).view(dtype), "mmap"

    monkeypatch.setattr(vmm_peer, "_driver", lambda: cu)
    monkeypatch.setattr(vmm_peer, "device_attributes", lambda dev: {})
    monkeypatch.setattr(vmm_peer, "tensor_over", tensor_over)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(checks, "DEV", "cpu")
    yield cu
    assert not cu.live and not cu.reserved and cu.contexts == 0  # every handle, range and retain released


@pytest.mark.parametrize("world,rank", [(1, 0), (2, 0), (3, 1), (4, 3)])
def test_receive_layout_checks_on_host_memory(host, world, rank):
    checks.test_receive_layout_through_the_range_lands_in_every_peers_own_chunk(torch, world, rank)


def test_padded_chunk_major_checks_on_host_memory(host):
    checks.test_chunks_rounded_up_to_the_granularity_chunk_major_view(torch)


def test_two_thread_ranks_checks_on_host_memory(host):
    checks.test_two_ranks_as_threads_exchange_real_descriptors_and_see_one_memory(torch)


def test_a_chunk_mapped_at_the_wrong_place_fails_the_checks(host, monkeypatch):
    orig = vmm_peer._map_rw

    def swap_ranks_0_and_1(cu, va, nbytes, handle, dev, what):
        shift = {"rank 0's chunk": nbytes, "rank 1's chunk": -nbytes}.get(what, 0)
        return orig(cu, va + shift, nbytes, handle, dev, what)

    monkeypatch.setattr(vmm_peer, "_map_rw", swap_ranks_0_and_1)
    with pytest.raises(AssertionError, match="elements wrong"):
        checks.test_receive_layout_through_the_range_lands_in_every_peers_own_chunk(torch, 2, 0)


def test_peer_alloc_two_thread_ranks_through_one_store_share_the_memory(host):
    import threading

    class Store(dict):
        def set(self, k, v):
            self[k] = v.encode()

        def get(self, k):
            return self[k]

    store, ranges, errors = Store(), [None, None], []

    def rank_main(r):
        try:
            ranges[r] = vmm_peer.peer_alloc(store, dev=0, timeout_s=20)(GRAN, 2, r, torch.int32)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(repr(err))

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in (1, 0)]  # rank 1 waits for rank 0's prefix
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        assert not errors and None not in ranges, errors
        n = GRAN // 4
        ranges[0].tensor[:] = torch.arange(2 * n, dtype=torch.int32)
        assert torch.equal(ranges[1].tensor, torch.arange(2 * n, dtype=torch.int32))
        assert list(store) == ["xstage-vmm-peer-0"]
    finally:
        for rg in ranges:
            if rg is not None:
                rg.free()
