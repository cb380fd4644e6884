"""``PeerRange`` on the CPU: bad input refused before any driver call, and the driver steps checked against a
recording fake driver (which chunk lands where, what is released, every descriptor closed). The real driver
path runs in ``test_vmm_peer_gpu.py``."""

import os
import tempfile
import types

import pytest
torch = pytest.importorskip("torch", reason="needs torch (the range hands out torch tensors); runs in .ci/run's CPU-torch suite")

from xstage.errors import InputError
from xstage.hw.common import vmm_peer
from xstage.hw.common.vmm_peer import LocalPeers, PeerRange

GRAN = 2 << 20


class _Struct:
    def __init__(self):
        self.location = types.SimpleNamespace(type=None, id=None)


class FakeDriver:
    """The calls ``vmm_peer`` makes, recorded; an exported descriptor is a temporary file, imported by inode."""

    def __init__(self):
        self.CUresult = types.SimpleNamespace(CUDA_SUCCESS=0)
        ns = types.SimpleNamespace
        self.CUmemAllocationType = ns(CU_MEM_ALLOCATION_TYPE_PINNED="pinned")
        self.CUmemLocationType = ns(CU_MEM_LOCATION_TYPE_DEVICE="device")
        self.CUmemAllocationHandleType = ns(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR="posix_fd")
        self.CUmemAllocationGranularity_flags = ns(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED="rec")
        self.CUmemAccess_flags = ns(CU_MEM_ACCESS_FLAGS_PROT_READWRITE="rw")
        self.CUmemAllocationProp = self.CUmemAccessDesc = _Struct
        self.CUdevice = int
        self.log, self.sizes, self.by_inode, self.next_handle, self.next_va = [], {}, {}, 100, 1 << 40
        self.live_handles, self.maps = set(), {}

    def cuInit(self, flags):
        return (0,)

    def cuDevicePrimaryCtxRetain(self, dev):
        self.log.append(("retain", dev))
        return 0, 7

    def cuCtxSetCurrent(self, ctx):
        return (0,)

    def cuDevicePrimaryCtxRelease(self, dev):
        self.log.append(("release_ctx", dev))
        return (0,)

    def cuMemGetAllocationGranularity(self, prop, flag):
        assert prop.requestedHandleTypes == "posix_fd" and prop.location.type == "device"
        return 0, GRAN

    def cuMemCreate(self, size, prop, flags):
        assert size % GRAN == 0 and prop.requestedHandleTypes == "posix_fd"
        h, self.next_handle = self.next_handle, self.next_handle + 1
        self.sizes[h] = size
        self.live_handles.add(h)
        self.log.append(("create", h))
        return 0, h

    def cuMemExportToShareableHandle(self, h, kind, flags):
        t = tempfile.TemporaryFile()
        fd = os.dup(t.fileno())
        t.close()
        self.by_inode[os.fstat(fd).st_ino] = h
        return 0, fd

    def cuMemImportFromShareableHandle(self, fd, kind):
        h = self.by_inode[os.fstat(fd).st_ino]
        self.log.append(("import", h))
        self.live_handles.add(("imported", h))
        return 0, ("imported", h)

    def cuMemAddressReserve(self, size, align, addr, flags):
        va, self.next_va = self.next_va, self.next_va + size + (1 << 30)
        assert va % align == 0
        self.log.append(("reserve", va, size))
        return 0, va

    def cuMemMap(self, va, size, offset, h, flags):
        self.maps[va] = (h, size)
        self.log.append(("map", va, h))
        return (0,)

    def cuMemSetAccess(self, va, size, descs, count):
        assert va in self.maps and descs[0].flags == "rw"
        return (0,)

    def cuMemUnmap(self, va, size):
        del self.maps[va]
        self.log.append(("unmap", va))
        return (0,)

    def cuMemRelease(self, h):
        self.live_handles.remove(h)
        self.log.append(("release", h))
        return (0,)

    def cuMemAddressFree(self, va, size):
        self.log.append(("free_va", va))
        return (0,)


@pytest.fixture
def fake(monkeypatch):
    cu = FakeDriver()
    monkeypatch.setattr(vmm_peer, "_driver", lambda: cu)
    monkeypatch.setattr(vmm_peer, "device_attributes", lambda dev: {})
    monkeypatch.setattr(vmm_peer, "tensor_over", lambda ptr, n, dtype, dev: (torch.zeros(n // 2, dtype=dtype), "fake"))
    return cu


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("world,rank", [(3, 1), (4, 0), (1, 0)])
def test_chunk_j_is_rank_js_allocation_at_va_plus_j_stride_and_free_undoes_all(fake, world, rank):
    before = _open_fds()
    peers = LocalPeers(world, rank, 4 * GRAN, torch.int16) if world > 1 else None
    r = PeerRange(3 * GRAN + 10, world, rank, torch.int16, exchange=peers.exchange if peers else None)
    assert r.chunk_stride == 4 * GRAN and r.total == 4 * GRAN * world and r.granularity == GRAN
    maps = {va: h for va, (h, _) in fake.maps.items() if r.va <= va < r.va + r.total}
    want = {r.va + j * r.chunk_stride: (r.own_handle if j == rank else ("imported", peers.handles[j]))
            for j in range(world)}
    assert maps == want
    assert _open_fds() == before + (0 if peers is None else world - 1)  # only the emulated peers' exports stay
    n_log = len(fake.log)
    r.free()
    tail = fake.log[n_log:]
    kinds = [k[0] for k in tail]
    assert kinds == ["unmap"] * world + ["release"] * world + ["free_va", "release_ctx"]
    assert not any(r.va <= va < r.va + 4 * GRAN * world for va in fake.maps)
    if peers:
        peers.free()
    assert not fake.live_handles and not fake.maps and _open_fds() == before


def test_a_failed_exchange_releases_the_own_chunk_and_closes_its_fd(fake):
    before = _open_fds()

    def refuse(fd):
        raise RuntimeError("fd exchange, rank 0 of 2, sending to rank 1: no answer within 1 s")

    with pytest.raises(RuntimeError, match="sending to rank 1"):
        PeerRange(GRAN, 2, 0, torch.int16, exchange=refuse)
    assert not fake.live_handles and _open_fds() == before


def test_an_exchange_giving_the_wrong_count_is_refused(fake):
    with pytest.raises(RuntimeError, match="gave 1 descriptors for world 2"):
        PeerRange(GRAN, 2, 0, torch.int16, exchange=lambda fd: [os.dup(fd)])
    assert not fake.live_handles


def test_view_spans_all_chunks_and_refuses_past_the_end(fake):
    peers = LocalPeers(2, 0, GRAN, torch.int16)
    r = PeerRange(GRAN, 2, 0, torch.int16, exchange=peers.exchange)
    n = GRAN // 2  # int16 elements per chunk
    v = r.view((2, 4), (n, 1))
    v[1] = 5
    assert int(r.tensor[n:n + 4].sum()) == 20 and int(r.tensor[:n].sum()) == 0
    with pytest.raises(InputError, match="reach element"):
        r.view((3, 4), (n, 1))
    r.free()
    peers.free()


@pytest.mark.parametrize("kw,field", [({"world": 0}, "world"), ({"chunk_bytes": 0}, "chunk_bytes"),
                                      ({"rank": 3}, "rank"), ({"world": 2, "exchange": None}, "exchange")])
def test_bad_input_is_one_value_error_naming_the_field_before_any_driver_call(monkeypatch, kw, field):
    monkeypatch.setattr(vmm_peer, "_driver", lambda: pytest.fail("the driver was touched"))
    args = {"chunk_bytes": GRAN, "world": 3, "rank": 0, "dtype": torch.int16, "exchange": lambda fd: []} | kw
    with pytest.raises(ValueError) as info:
        PeerRange(**args)
    assert isinstance(info.value, InputError) and info.value.field == field and "\n" not in str(info.value)


def test_local_peers_refuse_bad_input_too(monkeypatch):
    monkeypatch.setattr(vmm_peer, "_driver", lambda: pytest.fail("the driver was touched"))
    with pytest.raises(InputError, match=r"world\(=0\)"):
        LocalPeers(0, 0, GRAN, torch.int16)
    with pytest.raises(InputError, match=r"chunk_bytes\(=0\)"):
        LocalPeers(2, 0, 0, torch.int16)
