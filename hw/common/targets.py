"""Where the microbenchmark's stores land: local HBM, host-mapped pinned memory, or a peer GPU.

    local   device memory of the same GPU (the paper's local-memory control)
    host    pinned host memory mapped into the device (cudaHostAlloc, cudaHostAllocMapped): every
            16-byte store crosses PCIe. On one GPU this is a real X-Stage platform.
    peer    other ranks' buffers through torch symmetric memory (one process per GPU, torchrun), in
            one of two patterns (`PEER_PATTERNS`, laid out by `PeerLayout`):
              next  every producer of rank r stores into rank r+1's buffer (a ring: one sender per
                    buffer, one link direction per GPU busy);
              all   all-to-all: producer p of rank r stores into rank (r + 1 + p mod (W-1)) mod W, so
                    every rank's K producers spread over the W-1 others and every GPU's egress and
                    ingress are busy at once; each sender owns one disjoint region of every peer's
                    buffer.
            World size 1 maps this GPU's own symmetric buffer (``--self-peer``): it exercises the
            setup, not a remote link (``all`` then sends every producer to the own buffer).

Every target is a `TargetBuffer`: a device-usable address ``ptr`` of ``nbytes`` bytes. With UVA
(64-bit Linux, every CUDA GPU since Fermi) a mapped host allocation has the same address on the
host and the device. GPU libraries are imported inside the functions.

Never use NVLink multicast: `LAUNCH_ENV` is set in every launcher and before torch.distributed
starts (`peer_buffer` sets it too).
"""

import ctypes
import functools
import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass, field

import numpy as np

from xstage.errors import InputError, require_int

TARGETS = ("host", "local", "peer")
PEER_PATTERNS = ("next", "all")
NO_PRODUCER = 0xFFFFFFFF   # a row of a destination region that no producer writes (stays zero)
LAUNCH_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass
class TargetBuffer:
    name: str            # host | local | peer
    ptr: int             # device-usable address
    nbytes: int
    owner: object = None  # keeps the allocation alive (cupy array, torch tensor, symm-mem handle)
    info: dict = field(default_factory=dict)
    _free: object = None
    # peer target, pattern "all": every rank's buffer mapped into this GPU (index = rank), and a
    # cross-rank barrier the microbenchmark calls before every trial (None: no cross-rank sync)
    peer_ptrs: tuple = ()
    sync: object = None

    @property
    def pattern(self) -> str:
        """The peer pattern ("next" or "all"); "" for host / local."""
        return self.info.get("peer_pattern", "next") if self.name == "peer" else ""

    def layout(self, producers: int) -> "PeerLayout | None":
        """Where K producers store in the "all" pattern (None for every other target / pattern)."""
        if self.name != "peer" or self.pattern != "all":
            return None
        return PeerLayout(int(self.info["rank"]), int(self.info["world_size"]), producers, "all")

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


def check_peer_pattern(pattern: str, target: str | None) -> str:
    """A valid peer pattern for ``target`` ("all" needs the peer target)."""
    if pattern not in PEER_PATTERNS:
        raise InputError("--peer-pattern", pattern, f"must be one of {', '.join(PEER_PATTERNS)}")
    if pattern != "next" and target != "peer":
        raise InputError("--peer-pattern", pattern, f"needs --target peer (got --target {target})")
    return pattern


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


@dataclass(frozen=True)
class PeerLayout:
    """Where one sender's K producers store, in pattern ``next`` or ``all`` (pure; no GPU).

    A destination buffer is cut into `regions` equal regions, one per sender: sender s owns region
    ``(s - d - 1) mod W`` of destination d's buffer under ``all`` (0..W-2; the whole buffer, region 0,
    under ``next``, where d has one sender). Inside its region a sender lays out ``slots`` copies of
    `rows` producer slices: producer p writes row ``row_of[p]`` of copy ``b mod slots`` in burst b,
    i.e. at byte ``region_offset(d) + (slot * rows + row_of[p]) * B``. Under ``all`` producer p goes to
    rank ``(r + 1 + p mod (W-1)) mod W`` (row ``p // (W-1)``): every other rank gets
    floor(K/(W-1)) or one more producer, never the sender itself, and since destination d's k-th
    sender (k = (d - s - 1) mod W) is always the one whose k-th peer it is, every rank *receives*
    exactly K producers in all. At W = 1 both patterns send every producer to the own buffer.
    """
    rank: int
    world: int
    producers: int
    pattern: str = "all"

    def __post_init__(self):
        require_int("world", self.world)
        require_int("producers", self.producers)
        require_int("rank", self.rank, minimum=0)
        if self.rank >= self.world:
            raise InputError("rank", self.rank, f"must be < the world size {self.world}")
        if self.pattern not in PEER_PATTERNS:
            raise InputError("pattern", self.pattern, f"must be one of {', '.join(PEER_PATTERNS)}")

    @property
    def spread(self) -> int:
        """Destinations the producers rotate over."""
        return self.world - 1 if self.pattern == "all" and self.world > 1 else 1

    @property
    def regions(self) -> int:
        """Regions per destination buffer (one per sender that writes it)."""
        return self.spread

    @property
    def dest_of(self) -> np.ndarray:
        """Destination rank of every producer."""
        p = np.arange(self.producers)
        if self.spread == 1:
            return np.full(self.producers, peer_rank(self.rank, self.world))
        return (self.rank + 1 + p % self.spread) % self.world

    @property
    def row_of(self) -> np.ndarray:
        """Row of every producer's slice inside its destination region."""
        return np.arange(self.producers) // self.spread

    @property
    def rows(self) -> int:
        """Rows per copy in every region: the most producers any destination gets."""
        return -(-self.producers // self.spread)

    @property
    def dests(self) -> tuple:
        """The destination ranks that get producers, in order of their first producer."""
        return tuple(int(d) for d in dict.fromkeys(self.dest_of.tolist()))

    def region_index(self, dest: int) -> int:
        """This sender's region in ``dest``'s buffer."""
        return (self.rank - dest - 1) % self.world if self.spread > 1 else 0

    def region_bytes(self, nbytes: int) -> int:
        """Bytes of one region of an ``nbytes`` buffer (a multiple of 16)."""
        return nbytes // self.regions // 16 * 16

    def region_offset(self, dest: int, nbytes: int) -> int:
        """Byte offset of this sender's region in ``dest``'s buffer of ``nbytes``."""
        return self.region_index(dest) * self.region_bytes(nbytes)

    def tags(self, dest: int) -> np.ndarray:
        """uint32 [rows]: the pattern tag of the producer writing each row of ``dest``'s region
        (`NO_PRODUCER` where none does). A tag is ``rank << 16 | p`` under ``all`` (a store that
        lands in another sender's region is caught) and ``p`` under ``next``."""
        out = np.full(self.rows, NO_PRODUCER, dtype=np.uint32)
        p = np.flatnonzero(self.dest_of == dest)
        out[self.row_of[p]] = self.tag_base | p
        return out

    @property
    def tag_base(self) -> int:
        return self.rank << 16 if self.pattern == "all" else 0


def peer_buffer(nbytes: int, pattern: str = "next", backend: str = "torch") -> TargetBuffer:
    """Symmetric buffers of the other ranks, mapped into this GPU (torch symmetric memory; ``backend``
    "nvshmem": NVSHMEM's heap, ``xstage.hw.common.nvshmem.peer_target``, the same TargetBuffer).

    ``next``: ``ptr`` is the next rank's buffer (one destination). ``all``: ``peer_ptrs`` holds every
    rank's buffer (from the handle's buffer pointers, index = rank; ``ptr`` = the next rank's) and
    ``sync`` is a torch.distributed barrier, so that all ranks start every trial together.
    """
    check_peer_pattern(pattern, "peer")
    if backend != "torch":
        from xstage.hw.common.nvshmem import check_backend, peer_target
        check_backend(backend, "peer")
        return peer_target(nbytes, pattern)
    rank, world = init_distributed()
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem
    device = torch.device("cuda", torch.cuda.current_device())
    mine = symm_mem.empty(nbytes, dtype=torch.uint8, device=device)
    handle = symm_mem.rendezvous(mine, group=dist.group.WORLD)
    peer = peer_rank(rank, world)
    view = handle.get_buffer(peer, (nbytes,), torch.uint8)
    info = {"rank": rank, "world_size": world, "peer_rank": peer, "backend": "torch-symm-mem",
            "peer_pattern": pattern}
    views, ptrs, sync = [view], (), None
    if pattern == "all":
        views = [handle.get_buffer(r, (nbytes,), torch.uint8) for r in range(world)]
        ptrs = tuple(int(v.data_ptr()) for v in views)
        try:                       # the handle's own table, recorded as a cross-check only
            listed = [int(x) for x in handle.buffer_ptrs]
        except Exception:          # an older / other backend without it
            listed = None
        info.update(peer_ranks=sorted(set(range(world)) - {rank}) or [rank],
                    buffer_ptrs_match=None if listed is None else listed == list(ptrs))
        sync = functools.partial(dist.barrier, device_ids=[device.index]) if world > 1 else None
    # keep the same device as CuPy's current device for the kernels
    import cupy
    cupy.cuda.Device(device.index).use()
    return TargetBuffer("peer", int(view.data_ptr()), nbytes, owner=(mine, handle, views), info=info,
                        peer_ptrs=ptrs, sync=sync)


def open_target(target: str, nbytes: int, *, self_peer: bool = False, peer_pattern: str = "next",
                backend: str = "torch") -> TargetBuffer:
    """Check the target exists on this machine, then allocate ``nbytes`` there (peer: through ``backend``,
    torch symmetric memory or nvshmem)."""
    check_peer_pattern(peer_pattern, target)
    if backend != "torch":
        from xstage.hw.common.nvshmem import check_backend, core
        check_backend(backend, target)
        core()                       # one line before any GPU work when nvshmem4py is missing
    check_target(target, self_peer=self_peer)
    if target == "local":
        return local_buffer(nbytes)
    if target == "host":
        return host_buffer(nbytes)
    if backend != "torch":
        return peer_buffer(nbytes, peer_pattern, backend)
    return peer_buffer(nbytes, peer_pattern)
