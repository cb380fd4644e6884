"""Dispatch and Combine layouts of one rank's fused MoE FFN (pure numpy; the GPU side only indexes).

One GPU (rank ``rank`` of ``world_size``) holds ``local_experts`` experts and receives ``tokens``
token-expert assignments from all W source ranks. Each source rank ``s`` owns a Combine buffer of
``combine_rows`` rows of ``hidden`` columns; row ``t * top_k + k`` holds token ``t``'s ``k``-th expert
output, scaled by its router weight (the source sums its ``top_k`` rows afterwards). Every Combine row
has exactly one writer in the whole system; here we emulate the rows this GPU writes.

Receive layout (what Dispatch leaves behind, the kernel's input): one buffer ``x_recv`` of
``rows * block_m`` rows. Scheduler row ``p`` (``xstage.sim.schedules``: rows go expert by expert,
``O_e`` = first row of expert ``e``) is receive rows ``[p * block_m, (p + 1) * block_m)``. Expert
``e``'s ``count_e`` assignments fill its first ``count_e`` rows in (source rank, combine row) order;
the rest of its last block is zero padding. Per receive row: ``dest_rank`` (source rank to send the
result back to, -1 for padding), ``dest_row`` (row in that rank's Combine buffer), ``weight`` (router
weight, float32) and ``src_index`` (row of the source token in the flat ``[W * tokens_per_rank,
hidden]`` token array, -1 for padding).

Emulated routing: per-expert counts from ``xstage.sim.workloads.catalog.route`` (balanced: equal; skewed: a
hot 1/8 of the local experts take half), the assigned Combine slots a seeded uniform draw without
replacement from the W x ``combine_rows`` slots. ``combine_rows`` = ``top_k * ceil(2 tokens /
(W top_k))``: this GPU fills about half of every source's slots (the other half would come from
other GPUs), so 1/W of its rows stay local. A token may meet the same expert twice in this draw;
the kernel does not care (each slot is still written once).
"""

from dataclasses import dataclass

import numpy as np

from xstage.errors import InputError, require_int_fields, require_rank
from xstage.sim.schedules import MoeGrid, moe_grid
from xstage.sim.workloads.catalog import route

ROUTINGS = ("balanced", "skewed")
PRECISIONS = ("bf16", "w8a8")


@dataclass(frozen=True)
class MoeProblem:
    """One rank's share of an expert-parallel MoE layer: shapes, routing and tile sizes."""
    hidden: int
    intermediate: int
    tokens: int                 # token-expert assignments received by this GPU
    local_experts: int = 8
    routing: str = "balanced"
    world_size: int = 8
    rank: int = 0
    top_k: int = 8
    seed: int = 0
    block_m: int = 128
    block_n: int = 128
    precision: str = "bf16"     # bf16 | w8a8 (fp8 e4m3 weights and activations, float32 scales)

    def __post_init__(self):
        require_int_fields(self, ("hidden", "intermediate", "tokens", "local_experts", "world_size", "top_k",
                                  "block_m", "block_n"), nonnegative=("rank", "seed"))
        require_rank(self.rank, self.world_size)
        if self.routing not in ROUTINGS:
            raise InputError("routing", self.routing, f"must be one of {', '.join(ROUTINGS)}")
        if self.precision not in PRECISIONS:
            raise InputError("precision", self.precision, f"must be one of {', '.join(PRECISIONS)}")
        if self.block_n % 2:
            raise InputError("block_n", self.block_n, "must be even (gate and up halves of an L1 tile)")
        moe_grid([self.tokens], hidden=self.hidden, intermediate=self.intermediate, block_m=self.block_m,
                 block_n=self.block_n)  # raises on tile sizes that do not divide the shape

    @property
    def tokens_per_rank(self) -> int:
        """Tokens of each source rank (each has ``top_k`` Combine rows)."""
        return -(-2 * self.tokens // (self.world_size * self.top_k))

    @property
    def combine_rows(self) -> int:
        return self.tokens_per_rank * self.top_k

    @property
    def flops(self) -> float:
        """Useful FLOPs (no padding): Linear-1 (2 x intermediate columns) and Linear-2."""
        return 6.0 * self.tokens * self.hidden * self.intermediate

    def label(self) -> str:
        return (f"h{self.hidden}-i{self.intermediate}-t{self.tokens}-e{self.local_experts}-{self.routing}"
                f"-{self.precision}-w{self.world_size}-s{self.seed}")

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class DispatchLayout:
    """The receive layout and Combine destinations of one ``MoeProblem`` (see the module docstring)."""
    problem: MoeProblem
    tokens_per_expert: np.ndarray   # int64 [E]
    grid: MoeGrid
    dest_rank: np.ndarray           # int32 [rows * block_m], -1 = padding
    dest_row: np.ndarray            # int32 [rows * block_m]
    weight: np.ndarray              # float32 [rows * block_m], 0 on padding
    src_index: np.ndarray           # int64 [rows * block_m], -1 = padding

    @property
    def recv_rows(self) -> int:
        return self.grid.rows * self.problem.block_m

    @property
    def valid(self) -> np.ndarray:
        return self.dest_rank >= 0

    def combine_bytes(self, elem_bytes: int = 2) -> dict:
        """Bytes the L2 epilogues store: to the own rank (local) and to the W-1 others (remote)."""
        row_bytes = self.problem.hidden * elem_bytes
        own = int(np.sum(self.dest_rank == self.problem.rank))
        remote = int(np.sum(self.valid)) - own
        return {"local_bytes": own * row_bytes, "remote_bytes": remote * row_bytes}

    def tile_remote_bytes(self, tiles: np.ndarray, elem_bytes: int = 2) -> np.ndarray:
        """Per schedule tile: bytes its epilogue stores to other ranks (L2 tiles only)."""
        p, bm, bn = self.problem, self.problem.block_m, self.problem.block_n
        per_row = (self.valid & (self.dest_rank != p.rank)).reshape(-1, bm).sum(axis=1)
        rows = tiles[:, 6].astype(np.int64)
        return np.where(tiles[:, 0] == 1, per_row[rows] * bn * elem_bytes, 0).astype(np.int64)


def dispatch_layout(problem: MoeProblem) -> DispatchLayout:
    """Route ``problem.tokens`` assignments to the local experts and lay them out for the kernel."""
    p = problem
    counts = route(p.tokens, p.local_experts, 1, p.routing, p.seed)
    grid = moe_grid(counts, hidden=p.hidden, intermediate=p.intermediate, block_m=p.block_m, block_n=p.block_n)
    rng = np.random.default_rng(p.seed + 1)
    slots = rng.choice(p.world_size * p.combine_rows, size=p.tokens, replace=False)
    weights = rng.uniform(0.05, 1.0, size=p.tokens).astype(np.float32)
    n = grid.rows * p.block_m
    dest_rank = np.full(n, -1, dtype=np.int32)
    dest_row = np.zeros(n, dtype=np.int32)
    weight = np.zeros(n, dtype=np.float32)
    src_index = np.full(n, -1, dtype=np.int64)
    start = 0
    for e, (c, first) in enumerate(zip(counts, grid.first_row)):
        mine = np.sort(slots[start:start + c])          # (source rank, combine row) order
        at = int(first) * p.block_m + np.arange(c)
        rank, row = np.divmod(mine, p.combine_rows)
        dest_rank[at], dest_row[at] = rank, row
        weight[at] = weights[start:start + c]
        src_index[at] = rank * p.tokens_per_rank + row // p.top_k
        start += c
    return DispatchLayout(p, np.asarray(counts, dtype=np.int64), grid, dest_rank, dest_row, weight, src_index)


def check_layout(layout: DispatchLayout) -> None:
    """Invariants of a layout (raises InputError): counts, padding, unique Combine slots, bounds."""
    p, g = layout.problem, layout.grid
    bm = p.block_m
    if int(layout.tokens_per_expert.sum()) != p.tokens or int(layout.valid.sum()) != p.tokens:
        raise InputError("layout", int(layout.valid.sum()), f"must hold the {p.tokens} assignments")
    for e, (c, first) in enumerate(zip(layout.tokens_per_expert, g.first_row)):
        seg = layout.valid[int(first) * bm:(int(first) + g.rows_per_expert[e]) * bm]
        if not (seg[:c].all() and not seg[c:].any()):
            raise InputError("layout", f"expert {e}", "must fill its first rows and pad the rest")
    v = layout.valid
    if np.any(layout.dest_rank[v] >= p.world_size) or np.any(layout.dest_row[v] >= p.combine_rows) \
            or np.any(layout.dest_row[v] < 0):
        raise InputError("layout", "dest", "must point inside the W Combine buffers")
    slot = layout.dest_rank[v].astype(np.int64) * p.combine_rows + layout.dest_row[v]
    if len(np.unique(slot)) != len(slot):
        raise InputError("layout", "dest", "must give every Combine row at most one writer")
    if np.any(layout.src_index[v] != layout.dest_rank[v].astype(np.int64) * p.tokens_per_rank
              + layout.dest_row[v] // p.top_k):
        raise InputError("layout", "src_index", "must name the token of the Combine row")


def sequential_schedule(schedule):
    """The tiles of ``schedule`` as ONE program, in an order where every L2 tile follows all L1 tiles
    of its row: each program's order is kept and programs are advanced round-robin until blocked
    (as ``deadlock_free`` does). For the Triton interpreter, which runs programs one after another,
    so a cross-program l2_full wait could never complete there. Raises InputError on a deadlock."""
    from xstage.sim.schedules import KIND_L1, KIND_L2, Schedule

    t, off = schedule.tiles, schedule.sm_offsets
    pos = off[:-1].astype(np.int64).copy()
    done = np.zeros(int(t[:, 6].max()) + 1 if len(t) else 1, dtype=np.int64)
    order, moved = [], True
    while moved:
        moved = False
        for s in range(schedule.num_sms):
            while pos[s] < off[s + 1]:
                kind, row, need = t[pos[s], 0], t[pos[s], 6], t[pos[s], 7]
                if kind == KIND_L2 and done[row] < need:
                    break
                if kind == KIND_L1:
                    done[row] += 1
                order.append(pos[s])
                pos[s] += 1
                moved = True
    if len(order) != len(t):
        raise InputError("schedule", schedule.name, "deadlocks: no sequential order exists (lead D = 0?)")
    tiles = t[np.asarray(order, dtype=np.int64)].copy()
    tiles[:, 4] = 0
    tiles[:, 5] = np.arange(len(tiles))
    return Schedule(f"{schedule.name}_sequential", tiles, np.array([0, len(tiles)], dtype=np.int32),
                    dict(schedule.params))
