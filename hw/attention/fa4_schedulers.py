"""Tile schedulers for ``PersistentSm90`` (``xstage.hw.attention.fa4_persistent``), drop-in for FA4's
``StaticPersistentTileScheduler`` (FA4's SM90 ``__call__`` reads them for its module global ``SingleTileScheduler``):

- ``LocalLastScheduler``: the static grid-stride over a permuted tile order, this rank's own-chunk tiles last;
- ``SplitScheduler``: the local-last order with its last partial wave split along K/V into partner/owner units
  (kernel "staggersplit", ``fa4_split_kernel``);
- ``DynamicScheduler``: each CTA's next tile from a global atomic counter (the CTA that finishes first takes the
  next tile, as the hardware's block dispatch does for the stock one-tile grid), handed from the producer warp
  to the consumer warpgroups through a two-entry ring in shared memory.

Imports the CuTe DSL (the ``[gpu]`` extra)."""

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
from cutlass import Int32
from cutlass.cute import FastDivmodDivisorV2
from flash_attn.cute.tile_scheduler import StaticPersistentTileScheduler, WorkTileInfo
from quack.cute_dsl_utils import ParamsBase

@dataclass
class LocalLastParams(ParamsBase):
    """StaticPersistentTileScheduler's parameters (same names: its grid and advance use them) + the order's."""

    num_block_cluster_divmod: FastDivmodDivisorV2
    num_head_divmod: FastDivmodDivisorV2
    total_blocks_cluster: Int32
    remote_divmod: FastDivmodDivisorV2  # m-blocks per (batch, head) outside the own chunk
    chunk_divmod: FastDivmodDivisorV2  # m-blocks of one rank chunk
    chunk: Int32
    remote_total: Int32  # tiles outside the own chunk (all heads, batches): taken first
    cluster_shape_m: cutlass.Constexpr[int] = 1


class LocalLastScheduler(StaticPersistentTileScheduler):
    """FA4's static persistent scheduler (CTA b: tiles b, b + grid, ...) over the local-last order of
    ``fa4_persistent.local_last_tile`` (same arithmetic): the remote tiles first, this rank's own chunk last.
    ``rank`` / ``world`` are set per subclass (``local_last_scheduler``): compile-time constants."""

    rank, world = 0, 8

    @classmethod
    def to_underlying_arguments(cls, args, *, scheduling_mode=None, loc=None, ip=None):
        if tuple(args.cluster_shape_mn) != (1, 1):
            raise ValueError("LocalLastScheduler: clusters are not supported (cluster_shape_mn must be (1, 1))")
        chunk = args.num_block // cls.world
        remote = args.num_block - chunk
        return LocalLastParams(FastDivmodDivisorV2(args.num_block), FastDivmodDivisorV2(args.num_head),
                               Int32(args.num_block * args.num_head * args.num_batch), FastDivmodDivisorV2(remote),
                               FastDivmodDivisorV2(chunk), Int32(chunk), Int32(remote * args.num_head * args.num_batch))

    @classmethod
    def create(cls, params, ctx=None, *, loc=None, ip=None):
        return cls(params, cute.arch.block_idx()[0], loc=loc, ip=ip)  # FA4's creates its own class

    def get_current_work(self, *, loc=None, ip=None) -> WorkTileInfo:
        t = self._tile_idx
        block, head_idx, batch_idx = self.decode(t)
        return WorkTileInfo((block, head_idx, batch_idx, Int32(0)), t < self.params.total_blocks_cluster)

    def decode(self, t):
        """(m_block, head, batch) of the t-th tile of the local-last order."""
        p = self.params
        is_remote = t < p.remote_total
        u = cutlass.select_(is_remote, t, t - p.remote_total)
        hb_r, j_r = divmod(u, p.remote_divmod)
        hb_l, j_l = divmod(u, p.chunk_divmod)
        own = p.chunk * Int32(self.rank)
        block_r = cutlass.select_(j_r >= own, j_r + p.chunk, j_r)
        hb = cutlass.select_(is_remote, hb_r, hb_l)
        block = cutlass.select_(is_remote, block_r, own + j_l)
        batch_idx, head_idx = divmod(hb, p.num_head_divmod)
        return Int32(block), Int32(head_idx), Int32(batch_idx)

    def __new_from_mlir_values__(self, values):
        obj_list = []
        for obj, n in zip([self.params, self._tile_idx], self._values_pos):
            obj_list.append(cutlass.new_from_mlir_values(obj, values[:n]))
            values = values[n:]
        return type(self)(*obj_list, loc=self._loc)  # FA4's returns its own class: the order would be lost


_LOCAL_LAST = {}


def local_last_scheduler(rank: int, world: int):
    """The ``LocalLastScheduler`` subclass of one (rank, world) (one class per pair: FA4 reads it at trace time)."""
    if (rank, world) not in _LOCAL_LAST:
        _LOCAL_LAST[rank, world] = type(f"LocalLastScheduler_r{rank}w{world}", (LocalLastScheduler,),
                                        {"rank": rank, "world": world})
    return _LOCAL_LAST[rank, world]


@dataclass
class SplitParams(ParamsBase):
    """LocalLastParams (same meaning) + the split plan's whole-tile count; total_blocks_cluster counts units."""

    num_block_cluster_divmod: FastDivmodDivisorV2
    num_head_divmod: FastDivmodDivisorV2
    total_blocks_cluster: Int32  # units: whole + 2 · split (the grid and the validity bound)
    remote_divmod: FastDivmodDivisorV2
    chunk_divmod: FastDivmodDivisorV2
    chunk: Int32
    remote_total: Int32
    whole: Int32  # units below this are whole tiles (the full waves)
    cluster_shape_m: cutlass.Constexpr[int] = 1


class SplitScheduler(LocalLastScheduler):
    """The local-last order with its last partial wave split along K/V (``fa4_persistent.split_plan`` /
    ``split_unit``, same arithmetic): unit u < whole is tile u whole; unit whole + 2i + h is K/V half h of tile
    whole + i (h = 0: the partner, h = 1: the owner of pair i). The tile coordinate's split slot carries FA4's
    packed split word (parts << 16 | half), and each unit's (split word, pair, unit, whole, units) is also written
    to ``cur`` (per-thread registers the kernel makes at trace time: its block range and epilogue read them).
    ``workspace_addr`` (the pair slots) is set per subclass (``split_scheduler``): compiled in."""

    workspace_addr = 0
    cur = None

    @classmethod
    def to_underlying_arguments(cls, args, *, scheduling_mode=None, loc=None, ip=None):
        base = super().to_underlying_arguments(args)
        sms = cutlass.utils.HardwareInfo().get_device_multiprocessor_count()
        tiles = args.num_block * args.num_head * args.num_batch
        whole = tiles - tiles % sms
        units = whole + 2 * (tiles - whole)
        return SplitParams(base.num_block_cluster_divmod, base.num_head_divmod, Int32(units), base.remote_divmod,
                           base.chunk_divmod, base.chunk, base.remote_total, Int32(whole))

    def get_current_work(self, *, loc=None, ip=None) -> WorkTileInfo:
        p, u = self.params, self._tile_idx
        is_whole = u < p.whole
        k = u - p.whole
        t = cutlass.select_(is_whole, u, p.whole + (k >> 1))
        word = cutlass.select_(is_whole, Int32(1 << 16), Int32(2 << 16) | (k & 1))
        self.cur[0] = word
        self.cur[1] = cutlass.select_(is_whole, Int32(-1), k >> 1)
        self.cur[2] = u
        self.cur[3] = p.whole
        self.cur[4] = p.total_blocks_cluster
        block, head_idx, batch_idx = self.decode(t)
        return WorkTileInfo((block, head_idx, batch_idx, Int32(word)), u < p.total_blocks_cluster)


_SPLIT = {}


def split_scheduler(workspace_addr: int, rank: int, world: int):
    """The ``SplitScheduler`` subclass of one workspace and (rank, world) (FA4 reads it at trace time)."""
    key = (workspace_addr, rank, world)
    if key not in _SPLIT:
        _SPLIT[key] = type(f"SplitScheduler_{workspace_addr:x}_r{rank}w{world}", (SplitScheduler,),
                           {"workspace_addr": workspace_addr, "rank": rank, "world": world})
    return _SPLIT[key]


TAG_SHIFT, TAG_MASK, TILE_MASK = 20, 0x7FF, (1 << 20) - 1  # ring word: (k mod 2048) << 20 | tile (bit 31 stays 0)
SPIN_BOUND = 1 << 22  # a consumer waits at most this many polls for its tile (then ends: the checks see the hole)
MAX_TILES = TILE_MASK - 1024  # tiles + grid must fit the ring word's tile field


@cute.jit
def init_ring(ring: cute.Pointer):
    """Both ring entries to -1 (no tag matches), by the producer's loop lane before its first Q load."""
    if cute.arch.make_warp_uniform(cute.arch.warp_idx()) == 0:
        if cute.arch.lane_idx() == 0:
            cute.arch.atomic_exch(ring, Int32(-1), sem="relaxed", scope="cta")
            cute.arch.atomic_exch(ring + 1, Int32(-1), sem="release", scope="cta")


class DynamicScheduler(StaticPersistentTileScheduler):
    """FA4's static persistent scheduler's order and grid, but each CTA's k-th tile (k >= 1) is grid + the value a
    global counter had when its producer warp asked (atomic add): a CTA that runs ahead takes more tiles. The
    producer writes the tile into ring entry k mod 2 tagged with k; the consumer warps poll that entry (lane 0,
    bounded) and read the same tile. The launch's last fetch (value tiles - 1) resets the counter for the next
    launch. Entry k mod 2 is rewritten at k + 2 only after the consumers have started tile k + 1 (the producer
    cannot issue all of tile k + 1's K/V loads before the consumers free stages in it). ``counter_addr`` is set
    per subclass (``dynamic_scheduler``); ``ring`` (the shared pointer and the role) at trace time by the kernel."""

    counter_addr = 0
    ring = None

    def __init__(self, params, tile_idx, k=None, *, loc=None, ip=None):
        super().__init__(params, tile_idx, loc=loc, ip=ip)
        self._k = Int32(0) if k is None else k

    @classmethod
    def create(cls, params, ctx=None, *, loc=None, ip=None):
        return cls(params, cute.arch.block_idx()[0], Int32(0), loc=loc, ip=ip)

    @cute.jit
    def _fetch(self, k: Int32, total: Int32) -> Int32:
        c = Int32(0)
        if cute.arch.lane_idx() == 0:
            ctr = cute.make_ptr(Int32, self.counter_addr, cute.AddressSpace.gmem, assumed_align=4)
            c = cute.arch.atomic_add(ctr, Int32(1), sem="relaxed", scope="gpu")
            if c == total - 1:  # every CTA has made its last fetch: reset for the next launch
                cute.arch.atomic_exch(ctr, Int32(0), sem="relaxed", scope="gpu")
        c = cute.arch.shuffle_sync(c, 0)
        t = cute.arch.grid_dim()[0] + c
        if cute.arch.lane_idx() == 0:
            cute.arch.atomic_exch(self.ring.ptr + (k & 1), ((k & TAG_MASK) << TAG_SHIFT) | t, sem="release",
                                  scope="cta")
        return t

    @cute.jit
    def _receive(self, k: Int32, total: Int32) -> Int32:
        word = Int32(-1)
        n = Int32(0)
        if cute.arch.lane_idx() == 0:
            while n < SPIN_BOUND:
                word = cute.arch.atomic_add(self.ring.ptr + (k & 1), Int32(0), sem="acquire", scope="cta")
                n = cutlass.select_((word >> TAG_SHIFT) == (k & TAG_MASK), Int32(SPIN_BOUND + 1), n + 1)
        word = cute.arch.shuffle_sync(word, 0)
        n = cute.arch.shuffle_sync(n, 0)
        return cutlass.select_(n > SPIN_BOUND, word & TILE_MASK, total)

    def advance_to_next_work(self, *, loc=None, ip=None):
        k = self._k + 1
        total = self.params.total_blocks_cluster
        self._tile_idx = self._fetch(k, total) if self.ring.producer else self._receive(k, total)
        self._k = k
        return self.get_current_work()

    def __extract_mlir_values__(self):
        values, self._values_pos = [], []
        for obj in [self.params, self._tile_idx, self._k]:
            obj_values = cutlass.extract_mlir_values(obj)
            values += obj_values
            self._values_pos.append(len(obj_values))
        return values

    def __new_from_mlir_values__(self, values):
        obj_list = []
        for obj, n in zip([self.params, self._tile_idx, self._k], self._values_pos):
            obj_list.append(cutlass.new_from_mlir_values(obj, values[:n]))
            values = values[n:]
        return type(self)(*obj_list, loc=self._loc)


_DYNAMIC = {}


def dynamic_scheduler(counter_addr: int):
    """The ``DynamicScheduler`` subclass over one zeroed int32 counter in device memory (its address is compiled in)."""
    if counter_addr not in _DYNAMIC:
        _DYNAMIC[counter_addr] = type(f"DynamicScheduler_{counter_addr:x}", (DynamicScheduler,),
                                      {"counter_addr": counter_addr})
    return _DYNAMIC[counter_addr]


def local_last_dynamic_scheduler(counter_addr: int, rank: int, world: int):
    """Both: the dynamic scheduler's hand-out (``DynamicScheduler``) over the local-last order (``LocalLastScheduler``:
    its parameters and tile decoding), the own chunk's tiles handed out last."""
    key = (counter_addr, rank, world)
    if key not in _DYNAMIC:
        _DYNAMIC[key] = type(f"LocalLastDynamicScheduler_{counter_addr:x}_r{rank}w{world}",
                             (DynamicScheduler, LocalLastScheduler),
                             {"counter_addr": counter_addr, "rank": rank, "world": world})
    return _DYNAMIC[key]
