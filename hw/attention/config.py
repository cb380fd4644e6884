"""Shape of one sender's FlashAttention and the kernel's tiling (no GPU imports)."""

import math
from dataclasses import dataclass

from xstage.errors import InputError, require_int_fields
from xstage.sim.workloads.a2a_layout import A2ALayout

SUPPORTED_HEAD_DIMS = (64, 128)
STORE_CACHE_MODIFIERS = ("", ".wb", ".cg", ".cs", ".wt")
# the fused epilogue's send options: the fields of a FUSED_OPTIONS tuple (attention_bench), in its order
FUSED_FIELDS = ("store_cache", "drip", "split_tail", "stagger", "tail_parts")


@dataclass(frozen=True)
class AttentionConfig:
    """Shape of one sender's attention and the kernel's tiling (validated; bad values → InputError)."""

    seq_len: int
    heads: int = 3
    head_dim: int = 128
    world_size: int = 8
    rank: int = 0
    block_m: int = 128
    block_n: int = 64
    num_warps: int = 8
    num_stages: int = 3
    programs: int = 0  # persistent programs; 0 = min(tiles, SMs)
    tma: bool = False  # load Q/K/V through host TMA descriptors instead of pointers
    store_cache: str = ".wt"  # PTX cache operator of the stores to destinations ("" = default write-back)
    local_last: bool = True  # process the tiles of the sender's own chunk last (see attention._local_last)
    drip: bool = False  # fused: spread each tile's remote stores over the next tile's Q-loop
    stagger: bool = False  # fused: send each staged tile whole at a program-dependent step of the next Q-loop
    split_tail: bool = False  # split each tile of the last, partial wave into K/V parts (see attention._fa_fwd_kernel)
    tail_parts: int = 2  # split_tail: K/V parts per tile (2 = halves); 0 = the count that balances the tail best

    def __post_init__(self):
        require_int_fields(self, ("seq_len", "heads", "world_size", "block_m", "block_n", "num_warps", "num_stages"),
                           nonnegative=("programs", "tail_parts"))
        if self.tail_parts == 1 or self.tail_parts > MAX_TAIL_PARTS:
            raise InputError("tail_parts", self.tail_parts, f"must be 0 (balanced) or 2..{MAX_TAIL_PARTS}")
        for name in ("tma", "local_last", "drip", "stagger", "split_tail"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(name, getattr(self, name), "must be True or False")
        if self.store_cache not in STORE_CACHE_MODIFIERS:
            raise InputError("store_cache", self.store_cache, f"must be one of {STORE_CACHE_MODIFIERS}")
        if self.head_dim not in SUPPORTED_HEAD_DIMS:
            raise InputError("head_dim", self.head_dim, f"must be one of {SUPPORTED_HEAD_DIMS}")
        for name in ("block_m", "block_n"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise InputError(name, value, "must be a power of two >= 16")
        if self.seq_len % self.block_n:
            raise InputError("seq_len", self.seq_len, f"must be a multiple of block_n={self.block_n}")
        if self.drip and self.stagger:
            raise InputError("stagger", self.stagger, "cannot be combined with drip=True (two ways to send the staged tile)")
        if self.split_tail and self.seq_len // self.block_n < max(self.tail_parts, 2):
            raise InputError("seq_len", self.seq_len, f"must give >= {max(self.tail_parts, 2)} K/V steps of "
                             f"block_n={self.block_n} for split_tail=True (one per part)")
        if self.drip and self.split_tail and self.tail_parts != 2:
            raise InputError("tail_parts", self.tail_parts, "must be 2 with drip=True (drip sends in every part)")
        chunks = self.block_m // min(self.block_m, 2048 // self.head_dim)
        steps = self.seq_len // self.block_n // (2 if self.split_tail else 1)  # the shortest Q-loop
        if self.drip and steps < chunks:
            raise InputError("seq_len", self.seq_len, f"must give >= {chunks} K/V steps per Q-loop for drip=True")
        self.layout  # noqa: B018 - validates M % W, rank < W and block_m | M/W

    @property
    def layout(self) -> A2ALayout:
        return A2ALayout(self.seq_len, self.heads, self.head_dim, self.world_size, self.rank, self.block_m)

    @property
    def flops(self) -> float:
        """Non-causal forward: QK^T and PV, 2 * 2 * M * M * d per head."""
        return 4.0 * self.seq_len * self.seq_len * self.head_dim * self.heads

    def label(self) -> str:
        return (f"M={self.seq_len},H={self.heads},d={self.head_dim},W={self.world_size},bm={self.block_m},"
                f"bn={self.block_n},warps={self.num_warps},stages={self.num_stages}" + (",tma" if self.tma else "")
                + (f",programs={self.programs}" if self.programs else "") + f",store={self.store_cache or 'default'}"
                + ("" if self.local_last else ",natural-order") + (",drip" if self.drip else "") + (",stagger" if self.stagger else "")
                + (self._split_label() if self.split_tail else ""))

    def _split_label(self) -> str:
        return ",split-tail" + {2: "", 0: "=balanced"}.get(self.tail_parts, f"={self.tail_parts}")

    def tail_split(self, programs: int) -> tuple:
        """(whole tiles, parts per tail tile) on ``programs`` persistent programs: the first tiles run
        whole; with ``split_tail`` each tile of the last, partial wave runs as that many K/V parts."""
        tiles = self.layout.num_tiles
        tail = tiles % programs
        if not self.split_tail or tail == 0:
            return tiles, 1
        parts = self.tail_parts or balanced_parts(tail, programs, self.seq_len // self.block_n)
        return (tiles, 1) if parts == 1 else (tiles - tail, parts)


MAX_TAIL_PARTS = 16


def balanced_parts(tail_tiles: int, programs: int, steps: int, max_parts: int = MAX_TAIL_PARTS) -> int:
    """The number of K/V parts K per tail tile that makes the last wave shortest.

    ``tail_tiles`` tiles cut into K parts each go round-robin over ``programs``: the busiest program
    runs ceil(tail_tiles*K/programs) parts of 1/K of a Q-loop. The smallest K (1 = no split) with the
    least of that, at most ``max_parts`` and at most ``steps`` (one K/V step per part). On 132 SMs
    with 120 tail tiles: K = 11 (10/11 of a Q-loop; halves: a whole one).
    """
    best, best_len = 1, 1.0
    for k in range(2, min(max_parts, steps) + 1):
        length = math.ceil(tail_tiles * k / programs) / k
        if length < best_len - 1e-12:
            best, best_len = k, length
    return best
