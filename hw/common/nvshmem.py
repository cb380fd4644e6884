"""The ``nvshmem`` backend of the peer paths: symmetric buffers from NVSHMEM's heap (nvshmem4py).

Beside torch symmetric memory (``xstage.hw.common.symm``), selected with ``--backend nvshmem``. One
process per GPU from the same torchrun launch: rank 0 creates NVSHMEM's unique ID, torch.distributed
broadcasts it, every rank calls ``nvshmem.core.init(initializer_method="uid")``. Without ``WORLD_SIZE``
(or at 1) the process initialises itself as the only PE (self-PE), with no process group.

`symmetric_buffer` returns what ``symm.symmetric_buffer`` returns -- (local tensor, handle, int64 device
table of the W peer base addresses, index = PE) -- so the fused kernels and the calibration's peer target
take either. The table holds ``nvshmem_ptr`` of every PE; a PE that load/store cannot reach (NULL) is
refused with one line, since the peer paths store through plain pointers. The device-put issue path
(``put_nbi`` / ``put`` + ``quiet`` from a Numba-CUDA kernel) is ``xstage.hw.microbench.puts``; it puts to the
local symmetric address the peer target records as ``local_base``.

NVLink multicast stays off: ``apply_launch_env`` sets NVSHMEM_DISABLE_NVLS=1 (and the NCCL / torch
variables) before init. Every GPU library is imported inside the functions; on a machine without
nvshmem4py the backend refuses with one `InputError` line.
"""

import os
from dataclasses import dataclass, field

from xstage.errors import InputError
from xstage.hw.common.targets import apply_launch_env

BACKENDS = ("torch", "nvshmem")
INSTALL = ("needs nvshmem4py: pip install nvshmem4py-cu13 (with nvidia-nvshmem-cu13 and cuda-core >= 0.5; "
           "the [gpu] extra lists it)")

_STATE = {"initialized": False, "pe": 0, "npes": 1, "ours": False, "handles": []}


def check_backend(backend: str, target: str | None = "peer") -> str:
    """A valid backend for ``target`` (nvshmem only for the peer target)."""
    if backend not in BACKENDS:
        raise InputError("--backend", backend, f"must be one of {', '.join(BACKENDS)}")
    if backend != "torch" and target != "peer":
        raise InputError("--backend", backend, f"needs --target peer (got --target {target})")
    return backend


def core():
    """``nvshmem.core``, or one InputError line saying what to install."""
    try:
        import nvshmem.core as nvcore
    except ImportError:
        raise InputError("--backend", "nvshmem", INSTALL) from None
    return nvcore


def _ptr_fn():
    from nvshmem.bindings import ptr
    return ptr


def bootstrap(nvcore, rank: int, world: int, device=None, share=None) -> None:
    """UID bootstrap: rank 0 creates the unique ID, ``share(bytes | None) -> bytes`` hands it to every
    rank (torch.distributed broadcast; not called at world size 1), then every rank inits."""
    import numpy as np
    uid = nvcore.get_unique_id(empty=rank != 0)
    if world > 1:
        raw = uid._data.view(np.uint8)   # nvshmem4py's own emulated_mpi init broadcasts this array too
        got = share(bytes(raw) if rank == 0 else None)
        if rank != 0:
            raw[:] = np.frombuffer(got, dtype=np.uint8)
    nvcore.init(device=device, uid=uid, rank=rank, nranks=world, initializer_method="uid")


def _torch_share(payload):
    import torch.distributed as dist
    box = [payload]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def init():
    """Initialise NVSHMEM once per process: (pe, npes). Under torchrun (WORLD_SIZE > 1) the process group
    is set up first (``targets.init_distributed``) and carries the unique ID; otherwise self-PE."""
    apply_launch_env()
    nvcore = core()
    if _STATE["initialized"]:
        return _STATE["pe"], _STATE["npes"]
    import torch
    from cuda.core import Device
    world = int(os.environ.get("WORLD_SIZE", "1") or "1")
    rank = int(os.environ.get("RANK", "0")) if world > 1 else 0
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    torch.cuda.set_device(local)
    dev = Device(local)
    dev.set_current()
    if world > 1:
        from xstage.hw.common.targets import init_distributed
        init_distributed()
    bootstrap(nvcore, rank, world, device=dev, share=_torch_share)
    _STATE.update(initialized=True, pe=int(nvcore.my_pe()), npes=int(nvcore.n_pes()), ours=True)
    if not _STATE.get("atexit"):          # callers that never finalize (the W-rank benches) still free and finalize
        import atexit
        atexit.register(finalize)
        _STATE["atexit"] = True
    return _STATE["pe"], _STATE["npes"]


def peer_table(base: int, npes: int, ptr=None) -> list:
    """``nvshmem_ptr(base, pe)`` for every PE; one InputError line naming a PE load/store cannot reach."""
    ptr = ptr or _ptr_fn()
    out = []
    for pe in range(npes):
        p = int(ptr(int(base), pe) or 0)
        if p == 0:
            raise InputError("--backend", "nvshmem", f"PE {pe} is not reachable by load/store (nvshmem_ptr is "
                             "NULL); the peer paths need NVLink / P2P between every pair of GPUs")
        out.append(p)
    return out


@dataclass(eq=False)
class NvshmemHandle:
    """The nvshmem counterpart of torch's rendezvous handle: ``buffer_ptrs``, ``get_buffer``, ``close``."""
    tensor: object
    buffer_ptrs: list
    rank: int
    world_size: int
    views: dict = field(default_factory=dict)

    def get_buffer(self, pe: int, shape, dtype):
        """A torch view of PE ``pe``'s allocation (``nvshmem.core.get_peer_tensor``)."""
        view = self.views.get(pe)
        if view is None:
            view = self.views[pe] = core().get_peer_tensor(self.tensor, pe)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return view.reshape(-1).view(dtype)[:_numel(shape)].view(shape)

    def barrier(self) -> None:
        """All PEs meet, on the current torch stream (what torch's handle ``barrier()`` does; a no-op at W = 1)."""
        if self.world_size > 1:
            import torch
            from cuda.core import Stream
            nvcore = core()
            nvcore.barrier(nvcore.Teams.TEAM_WORLD, stream=Stream.from_handle(torch.cuda.current_stream().cuda_stream))

    def close(self) -> None:
        if self.tensor is not None:
            self.views.clear()
            core().free_tensor(self.tensor)
            self.tensor = None
        _STATE["handles"] = [h for h in _STATE["handles"] if h is not self]


def _numel(shape) -> int:
    n = 1
    for s in ((shape,) if isinstance(shape, int) else shape):
        n *= int(s)
    return n


def symmetric_buffer(shape, dtype, device=None, group=None):
    """(local tensor, `NvshmemHandle`, int64 table of the W peer base addresses) on NVSHMEM's heap.

    Collective over every PE (``nvshmem_malloc``), like ``symm.symmetric_buffer``; ``group`` is accepted
    for the same signature (NVSHMEM's world team is used). ``device`` defaults to the current GPU."""
    import torch
    pe, npes = init()
    nvcore = core()
    buf = nvcore.tensor(tuple(shape), dtype=dtype)
    ptrs = peer_table(int(buf.data_ptr()), npes)
    handle = NvshmemHandle(buf, ptrs, pe, npes)
    _STATE["handles"].append(handle)
    dev = device if device is not None else buf.device
    table = torch.tensor(ptrs, dtype=torch.int64, device=dev)
    return buf, handle, table


def finalize() -> None:
    """Free every allocation this module made and finalize, if this module initialised NVSHMEM."""
    for handle in list(_STATE["handles"]):
        handle.close()
    if _STATE["initialized"] and _STATE["ours"]:
        core().finalize()
    _STATE.update(initialized=False, pe=0, npes=1, ours=False, handles=[])


def peer_target(nbytes: int, pattern: str = "next"):
    """The calibration's peer `TargetBuffer` on NVSHMEM's heap (what ``targets.peer_buffer`` builds with
    torch symmetric memory): ``ptr`` = the next PE's buffer; ``all`` adds every PE's (``peer_ptrs``) and a
    torch.distributed barrier at W > 1. Closing it frees the allocation and finalizes NVSHMEM."""
    import functools

    import torch

    from xstage.hw.common.targets import TargetBuffer, check_peer_pattern, peer_rank
    check_peer_pattern(pattern, "peer")
    mine, handle, _ = symmetric_buffer((nbytes,), torch.uint8)
    rank, world = handle.rank, handle.world_size
    peer = peer_rank(rank, world)
    info = {"rank": rank, "world_size": world, "peer_rank": peer, "backend": "nvshmem", "peer_pattern": pattern,
            "issue": "st.global through nvshmem_ptr peer pointers", "local_base": int(mine.data_ptr())}
    ptrs, sync = (), None
    if pattern == "all":
        ptrs = tuple(handle.buffer_ptrs)
        info.update(peer_ranks=sorted(set(range(world)) - {rank}) or [rank], buffer_ptrs_match=True)
        if world > 1:
            import torch.distributed as dist
            sync = functools.partial(dist.barrier, device_ids=[mine.device.index])
    import cupy
    cupy.cuda.Device(mine.device.index).use()

    def free():
        handle.close()
        finalize()
    return TargetBuffer("peer", handle.buffer_ptrs[peer], nbytes, owner=(mine, handle), info=info,
                        peer_ptrs=ptrs, sync=sync, _free=free)


_FILL = r"""
extern "C" __global__ void fill(unsigned int* dst, unsigned long long n, unsigned int tag) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    dst[i] = (unsigned int)(i * 2654435761ull) ^ tag;
}
"""


def self_check(words: int = 1 << 22) -> dict:
    """Init, allocate ``words`` uint32 symmetric words, store a pattern into the next PE's buffer from a
    CUDA kernel through its nvshmem_ptr pointer (this PE's own at W = 1), and check every word of the own
    buffer against what the previous PE wrote. Returns the figures (``ok`` False on any mismatch)."""
    import cupy
    import numpy as np
    import torch
    buf, handle, table = symmetric_buffer((words,), torch.int32)
    pe, npes = handle.rank, handle.world_size
    dst = int(handle.buffer_ptrs[(pe + 1) % npes])
    cupy.cuda.Device(buf.device.index).use()
    kernel = cupy.RawKernel(_FILL, "fill")
    kernel((264,), (256,), (cupy.uint64(dst), cupy.uint64(words), cupy.uint32(0xA5000000 | pe)))
    cupy.cuda.runtime.deviceSynchronize()
    if npes > 1:
        import torch.distributed as dist
        dist.barrier(device_ids=[buf.device.index])
    src = (pe - 1) % npes
    expect = ((np.arange(words, dtype=np.uint64) * 2654435761) & 0xFFFFFFFF).astype(np.uint32) ^ np.uint32(
        0xA5000000 | src)
    got = buf.cpu().numpy().view(np.uint32)
    bad = int(np.count_nonzero(got != expect))
    out = {"pe": pe, "npes": npes, "words": words, "bytes": 4 * words, "mismatches": bad, "ok": bad == 0,
           "table": [hex(int(p)) for p in table.tolist()], "local_ptr": hex(int(buf.data_ptr())),
           "wrote_to_pe": (pe + 1) % npes}
    handle.close()
    return out
