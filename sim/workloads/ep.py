"""Expert-parallel routing over W real ranks: who owns which expert, who writes which Combine row (pure numpy).

W ranks, ``local_experts`` E per rank (global expert ``g = r * E + e`` lives on rank ``r``), ``top_k``
K. Every rank has ``T = tokens / K`` source tokens and a Combine buffer of ``T * K`` rows (row
``t * K + k`` = its token t's k-th expert output times the router weight); the global source slot of
(rank s, token t, k) is ``(s * T + t) * K + k`` = ``s * T * K`` + that Combine row.

Routing, from the problem's seed alone (so every rank regenerates every other rank's routing):

- per-rank expert counts ``route(tokens, E, 1, routing, seed + RANK_SEED_STRIDE * r)`` — rank ``r``'s
  local experts get exactly the counts of the single-GPU sweep (``moe_layout.dispatch_layout``; rank 0
  with the same seed has the identical grid), and every rank receives exactly ``tokens`` assignments;
- the W*T*K source slots take these W*tokens assignments: the global experts, in a seeded random order,
  each repeated by its count, fill the slots column-major over a seeded random token order (list
  position j -> token ``perm[j mod W*T]``, k = ``j div W*T``). A token therefore meets K distinct
  experts whenever no expert takes more than W*T assignments (not possible for a skewed top-K-of-K
  router at W = 1, which the single-GPU emulation allows too: each slot still has one writer);
- router weights uniform in [0.05, 1), one per slot.

The rank ``rank`` of an ``EpProblem`` then receives the slots of its experts; ``ep_layout`` lays them out
exactly as on one GPU (``moe_layout.DispatchLayout``: expert by expert, each in (source rank, Combine
row) order, padded to BLOCK_M), with ``dest_rank`` = the source rank, so the kernel is unchanged.
Every Combine row of every rank is written by exactly one rank, the owner of its expert.
"""

import numpy as np

from xstage.errors import InputError
from xstage.sim.workloads.moe_layout import DispatchLayout, MoeProblem
from xstage.sim.schedules import moe_grid
from xstage.sim.workloads.catalog import route

RANK_SEED_STRIDE = 1000


class EpProblem(MoeProblem):
    """Rank ``rank`` of an expert-parallel layer over ``world_size`` GPUs (fields as ``MoeProblem``).

    ``tokens``: assignments each rank receives (= its source tokens x top_k); ``combine_rows`` = tokens."""

    def __post_init__(self):
        super().__post_init__()
        if self.tokens % self.top_k:
            raise InputError("tokens", self.tokens, f"must be a multiple of top_k={self.top_k} "
                             "(every rank has tokens / top_k source tokens)")

    @property
    def tokens_per_rank(self) -> int:
        return self.tokens // self.top_k

    def label(self) -> str:
        return super().label().replace(f"-w{self.world_size}-", f"-ep{self.world_size}-")

    def for_rank(self, rank: int) -> "EpProblem":
        from dataclasses import replace

        return replace(self, rank=rank)


def rank_counts(p: EpProblem) -> np.ndarray:
    """int64 [W, E]: assignments per local expert of every rank."""
    return np.stack([route(p.tokens, p.local_experts, 1, p.routing, p.seed + RANK_SEED_STRIDE * r)
                     for r in range(p.world_size)]).astype(np.int64)


def ep_routing(p: EpProblem) -> tuple[np.ndarray, np.ndarray]:
    """(global expert int64 [W*T*K], router weight float32 [W*T*K]) of every source slot."""
    counts = rank_counts(p).ravel()
    n_tokens = p.world_size * p.tokens_per_rank
    rng = np.random.default_rng([p.seed, 1])
    order = rng.permutation(len(counts))
    listed = np.repeat(order, counts[order])
    j = np.arange(len(listed))
    slot = rng.permutation(n_tokens)[j % n_tokens] * p.top_k + j // n_tokens
    expert = np.empty(len(listed), dtype=np.int64)
    expert[slot] = listed
    return expert, rng.uniform(0.05, 1.0, size=len(listed)).astype(np.float32)


def slot_writer(p: EpProblem) -> np.ndarray:
    """int64 [W*T*K]: the rank that writes each Combine row (the owner of the slot's expert)."""
    return ep_routing(p)[0] // p.local_experts


def ep_layout(p: EpProblem) -> DispatchLayout:
    """The receive layout and Combine destinations of rank ``p.rank`` (see the module docstring)."""
    if not isinstance(p, EpProblem):
        raise InputError("problem", type(p).__name__, "must be an EpProblem")
    expert, weight = ep_routing(p)
    E, bm = p.local_experts, p.block_m
    mine = np.flatnonzero(expert // E == p.rank)            # ascending slot: (source rank, Combine row) order
    local = expert[mine] - p.rank * E
    by_expert = np.argsort(local, kind="stable")
    mine, local = mine[by_expert], local[by_expert]
    counts = np.bincount(local, minlength=E).astype(np.int64)
    grid = moe_grid(counts, hidden=p.hidden, intermediate=p.intermediate, block_m=bm, block_n=p.block_n)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    at = grid.first_row[local] * bm + np.arange(len(mine)) - start[local]
    n = grid.rows * bm
    dest_rank = np.full(n, -1, dtype=np.int32)
    dest_row = np.zeros(n, dtype=np.int32)
    row_weight = np.zeros(n, dtype=np.float32)
    src_index = np.full(n, -1, dtype=np.int64)
    dest_rank[at], dest_row[at] = np.divmod(mine, p.combine_rows)
    row_weight[at] = weight[mine]
    src_index[at] = mine // p.top_k
    return DispatchLayout(p, counts, grid, dest_rank, dest_row, row_weight, src_index)


def all_layouts(p: EpProblem) -> list:
    """Every rank's layout (what each rank can regenerate from the seed)."""
    return [ep_layout(p.for_rank(r)) for r in range(p.world_size)]


def a2a_plan(p: EpProblem, layouts: list) -> dict:
    """Dispatch as one all_to_all of token rows, seen from rank ``p.rank``.

    ``send_rows``: own token rows (0..T-1) in the order they go out, grouped by destination rank and in
    each destination's receive order; ``send_counts`` [W]; ``recv_counts`` [W] (rows from each source);
    ``recv_at``: receive-layout rows of the received rows, in arrival order (grouped by source)."""
    me, T = p.rank, p.tokens_per_rank
    from_me = [np.flatnonzero(lay.dest_rank == me) for lay in layouts]
    own = layouts[me]
    by_source = [np.flatnonzero(own.dest_rank == s) for s in range(p.world_size)]
    return {"send_rows": np.concatenate([layouts[r].src_index[f] - me * T for r, f in enumerate(from_me)]),
            "send_counts": [len(f) for f in from_me], "recv_counts": [len(b) for b in by_source],
            "recv_at": np.concatenate(by_source)}
