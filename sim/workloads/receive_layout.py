"""The Ulysses receive layout of one rank, for kernels that take an output tensor (FA4's ``out=``): sizes only.

Rank ``r`` of ``W`` holds ``O_r[M, H, d]``; after the post-attention All-to-All rank ``j`` holds
``D_j[M/W, W·H, d]`` with ``D_j[s − j·M/W, r·H + h] = O_r[s, h]``. Put the W receive buffers one after
another and they form one ``[M, W·H, d]`` array; rank r's share of it is the view
``buf[:, r·H:(r+1)·H]`` — shape ``(M, H, d)``, strides ``(W·H·d, d, 1)``. The views themselves, and FA4's
conditions on them, are in ``hw/attention/fa4_layout.py``. Pure: no GPU library.
"""

import math
from dataclasses import dataclass

from xstage.errors import InputError

TILE_M = 128  # FA4's SM90 block_m for d <= 128: a destination chunk must hold whole tiles


@dataclass(frozen=True)
class ReceiveLayout:
    """One rank's view of the All-to-All on ``world_size`` ranks (batch 1)."""

    seq_len: int
    heads: int
    head_dim: int
    world_size: int
    rank: int = 0
    elem_bytes: int = 2

    def __post_init__(self):
        for field in ("seq_len", "heads", "head_dim", "world_size", "elem_bytes"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(field, value, "must be a positive integer")
        if not 0 <= self.rank < self.world_size:
            raise InputError("rank", self.rank, f"must be in [0, {self.world_size})")
        if self.seq_len % (self.world_size * TILE_M):
            raise InputError("seq_len", self.seq_len,
                             f"must be a multiple of world_size * {TILE_M} = {self.world_size * TILE_M}")
        if self.head_dim % 8 or not 8 <= self.head_dim <= 256:
            raise InputError("head_dim", self.head_dim, "must be a multiple of 8 in [8, 256] (FA4 on SM90)")

    @property
    def chunk_rows(self) -> int:
        return self.seq_len // self.world_size

    @property
    def row_bytes(self) -> int:  # one row of a receive buffer
        return self.world_size * self.heads * self.head_dim * self.elem_bytes

    @property
    def slice_bytes(self) -> int:  # this rank's heads in one row
        return self.heads * self.head_dim * self.elem_bytes

    @property
    def chunk_bytes(self) -> int:  # one receive buffer D_j
        return self.chunk_rows * self.row_bytes

    @property
    def total_bytes(self) -> int:  # all W receive buffers
        return self.world_size * self.chunk_bytes

    @property
    def remote_bytes(self) -> int:  # what this rank sends to the W - 1 others
        return (self.world_size - 1) * self.chunk_rows * self.slice_bytes

    @property
    def flops(self) -> float:
        return 4.0 * self.seq_len * self.seq_len * self.heads * self.head_dim

    def tiles(self, tile_m: int = TILE_M) -> int:
        return math.ceil(self.seq_len / tile_m) * self.heads

    def label(self) -> str:
        return f"M={self.seq_len},H={self.heads},d={self.head_dim},W={self.world_size},fa4"

    def describe(self) -> dict:
        return {"M": self.seq_len, "H": self.heads, "D": self.head_dim, "W": self.world_size, "rank": self.rank,
                "rows_per_chunk": self.chunk_rows, "chunk_bytes": self.chunk_bytes,
                "total_dst_bytes": self.total_bytes, "remote_bytes": self.remote_bytes, "tiles": self.tiles(),
                "flops": self.flops}
