"""Ulysses post-attention All-to-All layout: which rows of which head go to which rank, and where.

Before the post-attention All-to-All, rank ``r`` of ``W`` holds the attention output of the whole
sequence (``M`` tokens) for its ``H`` local heads, ``O_r[M, H, d]`` (head partition). After it,
rank ``j`` holds the tokens ``[j*M/W, (j+1)*M/W)`` of all ``W*H`` heads (sequence partition), as
one buffer ``D_j[M/W, W*H, d]``:

    D_j[s - j*M/W, r*H + h, :] = O_r[s, h, :]      for s in [j*M/W, (j+1)*M/W)

A FlashAttention output tile (``block_m`` query rows of one head) therefore goes to one rank as a
whole when ``block_m`` divides ``M/W``; that is required here. Pure numpy; no GPU imports.
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd

from xstage.errors import InputError, require_int_fields, require_rank


@dataclass(frozen=True)
class A2ALayout:
    """The post-attention All-to-All of one sender ``rank`` (sizes in rows, heads and elements)."""

    seq_len: int          # M, tokens of the whole sequence
    heads: int            # H, heads held per rank
    head_dim: int         # d
    world_size: int = 8   # W
    rank: int = 0         # the sender
    block_m: int = 128    # rows of one output tile
    elem_bytes: int = 2   # bf16

    def __post_init__(self):
        require_int_fields(self, ("seq_len", "heads", "head_dim", "world_size", "block_m", "elem_bytes"),
                           nonnegative=("rank",))
        require_rank(self.rank, self.world_size)
        if self.seq_len % self.world_size:
            raise InputError("seq_len", self.seq_len, f"must be divisible by world_size={self.world_size}")
        if self.chunk_rows % self.block_m:
            raise InputError("block_m", self.block_m,
                             f"must divide the per-rank chunk M/W={self.chunk_rows} rows")

    # --- sizes ---------------------------------------------------------------------------
    @property
    def chunk_rows(self) -> int:
        """Rows (tokens) per destination rank, M / W."""
        return self.seq_len // self.world_size

    @property
    def heads_total(self) -> int:
        return self.world_size * self.heads

    @property
    def dest_shape(self) -> tuple:
        """Shape of every rank's sequence-partitioned buffer: (M/W, W*H, d)."""
        return (self.chunk_rows, self.heads_total, self.head_dim)

    @property
    def m_blocks(self) -> int:
        return self.seq_len // self.block_m

    @property
    def num_tiles(self) -> int:
        return self.m_blocks * self.heads

    @property
    def tile_bytes(self) -> int:
        return self.block_m * self.head_dim * self.elem_bytes

    @property
    def total_bytes(self) -> int:
        """Bytes of this sender's whole output, M * H * d * elem."""
        return self.seq_len * self.heads * self.head_dim * self.elem_bytes

    @property
    def remote_bytes(self) -> int:
        """Bytes this sender writes to other ranks: (W-1)/W of its output."""
        return self.total_bytes // self.world_size * (self.world_size - 1)

    # --- maps ----------------------------------------------------------------------------
    def dest_of_row(self, rows):
        """(destination rank, row in that rank's buffer) of sequence rows ``rows`` (array-like)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.seq_len):
            raise InputError("rows", f"[{rows.min()}, {rows.max()}]", f"must lie in [0, {self.seq_len})")
        return rows // self.chunk_rows, rows % self.chunk_rows

    def dest_head(self, head):
        """Head index in the destination buffer of local head ``head``: rank * H + head."""
        return self.rank * self.heads + np.asarray(head, dtype=np.int64)

    def tile_of(self, tile: int) -> tuple:
        """(head, m_block) of output tile ``tile``; tiles run m_block-fastest within a head."""
        return tile // self.m_blocks, tile % self.m_blocks

    def work_order(self, local_last: bool = True) -> np.ndarray:
        """Tile ids in the order the persistent kernel takes them (work item w → tile).

        ``local_last``: the tiles of the sender's own chunk come after all remote tiles (the kernel's
        ``_local_last``), so the last wave, whose stores drain after the compute ends, sends less.
        """
        tiles = np.arange(self.num_tiles, dtype=np.int64)
        if not local_last:
            return tiles
        local = (tiles % self.m_blocks) // (self.chunk_rows // self.block_m) == self.rank
        return np.concatenate([tiles[~local], tiles[local]])

    def tile_plan(self) -> pd.DataFrame:
        """One row per output tile: where its rows go and how many bytes leave the sender."""
        tiles = np.arange(self.num_tiles, dtype=np.int64)
        head, m_block = tiles // self.m_blocks, tiles % self.m_blocks
        row0 = m_block * self.block_m
        dest, dest_row0 = self.dest_of_row(row0)
        remote = dest != self.rank
        return pd.DataFrame({"tile": tiles, "head": head, "m_block": m_block, "row0": row0,
                             "dest_rank": dest, "dest_row0": dest_row0, "dest_head": self.dest_head(head),
                             "remote": remote, "bytes_remote": np.where(remote, self.tile_bytes, 0)})

    # --- numpy references ----------------------------------------------------------------
    def scatter(self, out, fill=np.nan) -> list:
        """This sender's contribution: W buffers of ``dest_shape``; other senders' heads = ``fill``.

        ``out`` is the sender's attention output, shape (M, H, d).
        """
        out = np.asarray(out)
        if out.shape != (self.seq_len, self.heads, self.head_dim):
            raise InputError("out.shape", out.shape, f"must be {(self.seq_len, self.heads, self.head_dim)}")
        dtype = np.result_type(out.dtype, np.float32) if fill is np.nan else out.dtype
        bufs = [np.full(self.dest_shape, fill, dtype=dtype) for _ in range(self.world_size)]
        h0 = self.rank * self.heads
        for j, buf in enumerate(bufs):
            buf[:, h0:h0 + self.heads, :] = out[j * self.chunk_rows:(j + 1) * self.chunk_rows]
        return bufs

    def sender_slice(self) -> tuple:
        """Index into a destination buffer selecting the columns (heads) this sender owns."""
        h0 = self.rank * self.heads
        return (slice(None), slice(h0, h0 + self.heads), slice(None))


def all_to_all(outs: list) -> list:
    """The full post-attention All-to-All: ``outs[r]`` (M, H, d) of every rank → W (M/W, W*H, d)."""
    world = len(outs)
    if world < 1:
        raise InputError("outs", world, "must hold one output per rank")
    seq_len, heads, head_dim = np.asarray(outs[0]).shape
    chunk = seq_len // world
    if seq_len % world:
        raise InputError("seq_len", seq_len, f"must be divisible by world_size={world}")
    return [np.concatenate([np.asarray(o)[j * chunk:(j + 1) * chunk] for o in outs], axis=1)
            for j in range(world)]


def head_partition(seq_parts: list) -> list:
    """The pre-attention All-to-All (inverse direction): W (M/W, W*H, d) → W (M, H, d)."""
    world = len(seq_parts)
    chunk, heads_total, head_dim = np.asarray(seq_parts[0]).shape
    if heads_total % world:
        raise InputError("heads_total", heads_total, f"must be divisible by world_size={world}")
    heads = heads_total // world
    return [np.concatenate([np.asarray(p)[:, r * heads:(r + 1) * heads] for p in seq_parts], axis=0)
            for r in range(world)]
