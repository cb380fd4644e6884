"""Where the microbenchmark's stores land: local HBM, host-mapped pinned memory, or a peer GPU.

    local   device memory of the same GPU (the paper's local-memory control)
    host    pinned host memory mapped into the device (cudaHostAlloc, cudaHostAllocMapped): every
            16-byte store crosses PCIe. On one GPU this is a real X-Stage platform.
    peer    the next rank's buffer through torch symmetric memory (one process per GPU, torchrun).
            World size 1 maps this GPU's own symmetric buffer (``--self-peer``): it exercises the
            setup, not a remote link.

Every target is a `TargetBuffer`: a device-usable address ``ptr`` of ``nbytes`` bytes. With UVA
(64-bit Linux, every CUDA GPU since Fermi) a mapped host allocation has the same address on the
host and the device. GPU libraries are imported inside the functions.

Never use NVLink multicast: `LAUNCH_ENV` is set in every launcher and before torch.distributed
starts (`peer_buffer` sets it too).
"""

import ctypes
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass, field

from xstage.errors import InputError

TARGETS = ("host", "local", "peer")
LAUNCH_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass
class TargetBuffer:
    name: str            # host | local | peer
    ptr: int             # device-usable address
    nbytes: int
    owner: object = None  # keeps the allocation alive (cupy array, torch tensor, symm-mem handle)
    info: dict = field(default_factory=dict)
    _free: object = None

    def host_view(self):
        """The buffer as a numpy uint32 array (host target only), else None."""
        if self.name != "host":
            return None
        import numpy as np
        return np.ctypeslib.as_array((ctypes.c_uint32 * (self.nbytes // 4)).from_address(self.ptr))

    def close(self) -> None:
        if self._free is not None:
            self._free()
            self._free = None
        self.owner = None


def gpu_count() -> int:
    """CUDA GPUs visible through CuPy (0 when CuPy or a driver is missing)."""
    try:
        import cupy
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # ImportError, CUDARuntimeError (no driver / no device)
        return 0


def check_target(target: str, *, self_peer: bool = False) -> None:
    """Refuse a target this machine lacks, with one InputError line."""
    if target not in TARGETS:
        raise InputError("target", target, f"must be one of {', '.join(TARGETS)}")
    n = gpu_count()
    if n == 0:
        if importlib.util.find_spec("cupy") is None and os.path.exists("/dev/nvidiactl"):
            raise InputError("target", target, "needs CuPy for its kernels; install cupy-cuda12x or "
                             "cupy-cuda13x to match the CUDA driver")
        raise InputError("target", target, "needs a CUDA GPU; none found")
    if target == "peer" and n < 2 and not self_peer and int(os.environ.get("WORLD_SIZE", "1")) < 2:
        raise InputError("target", target, f"needs >= 2 GPUs in this node (found {n}); pass --self-peer to run "
                         "the symmetric-memory setup at world size 1 against this GPU's own buffer")


def local_buffer(nbytes: int) -> TargetBuffer:
    import cupy
    arr = cupy.empty(nbytes, dtype=cupy.uint8)
    return TargetBuffer("local", int(arr.data.ptr), nbytes, owner=arr,
                        info={"device": int(cupy.cuda.Device().id)})


def host_buffer(nbytes: int) -> TargetBuffer:
    """Pinned host memory mapped into the device's address space (cudaHostAllocMapped)."""
    import cupy
    rt = cupy.cuda.runtime
    ptr = int(rt.hostAlloc(nbytes, rt.hostAllocMapped | rt.hostAllocPortable))
    buf = TargetBuffer("host", ptr, nbytes, info={"flags": "cudaHostAllocMapped|cudaHostAllocPortable"})
    buf._free = lambda: rt.freeHost(ptr)
    return buf


# --- peer: torch symmetric memory, one process per GPU ---------------------------------------

def apply_launch_env(env: dict | None = None) -> dict:
    """Set the no-multicast variables in ``env`` (default: this process's environment)."""
    target = os.environ if env is None else env
    for key, value in LAUNCH_ENV.items():
        target[key] = value
    return target


def torchrun_command(nproc: int, argv: list[str]) -> list[str]:
    """The torchrun command line that runs ``argv`` (a python module invocation) on nproc GPUs."""
    if nproc < 1:
        raise InputError("nproc", nproc, "must be >= 1")
    exe = shutil.which("torchrun")
    launcher = [exe] if exe else [sys.executable, "-m", "torch.distributed.run"]
    return [*launcher, "--standalone", f"--nproc-per-node={nproc}", *argv]


def init_distributed():
    """Initialise torch.distributed (NCCL) from torchrun's variables, or as a single rank."""
    apply_launch_env()
    import torch
    import torch.distributed as dist
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    torch.cuda.set_device(local)
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    else:
        store = dist.HashStore()
        dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", local))
    return dist.get_rank(), dist.get_world_size()


def peer_rank(rank: int, world: int) -> int:
    """Each rank writes into the next rank's buffer (itself at world size 1)."""
    return (rank + 1) % world


def peer_buffer(nbytes: int) -> TargetBuffer:
    """The next rank's symmetric buffer, mapped into this GPU (torch symmetric memory)."""
    rank, world = init_distributed()
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem
    device = torch.device("cuda", torch.cuda.current_device())
    mine = symm_mem.empty(nbytes, dtype=torch.uint8, device=device)
    handle = symm_mem.rendezvous(mine, group=dist.group.WORLD)
    peer = peer_rank(rank, world)
    view = handle.get_buffer(peer, (nbytes,), torch.uint8)
    # keep the same device as CuPy's current device for the kernels
    import cupy
    cupy.cuda.Device(device.index).use()
    return TargetBuffer("peer", int(view.data_ptr()), nbytes, owner=(mine, handle, view),
                        info={"rank": rank, "world_size": world, "peer_rank": peer, "backend": "torch-symm-mem"})


def open_target(target: str, nbytes: int, *, self_peer: bool = False) -> TargetBuffer:
    """Check the target exists on this machine, then allocate ``nbytes`` there."""
    check_target(target, self_peer=self_peer)
    if target == "local":
        return local_buffer(nbytes)
    if target == "host":
        return host_buffer(nbytes)
    return peer_buffer(nbytes)
