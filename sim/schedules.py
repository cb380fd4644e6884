"""Tile schedules of a fused MoE FFN as data: expert-wave and interleaved (the paper's Algorithm 1).

A schedule tells each persistent program (one per SM) which tiles it runs, in which order. The
arrays exported by ``Schedule.to_arrays()`` are the contract with the GPU kernels:

``tiles``  int32 [T, 8], fields ``TILE_FIELDS`` (index constants ``TILE_KIND`` ... ``TILE_L2_NEED``):
    kind     0 = L1 (Linear-1, gate+up), 1 = L2 (Linear-2), 2 = FA output tile
    expert   local expert id (FA: head)
    m_block  row block inside that expert, in BLOCK_M tokens (FA: query block)
    n_block  N tile of that kind's output, in BLOCK_N columns (L1 output has 2*h_inter columns)
    sm       persistent program id that runs the tile
    seq      position in that program's order
    row      global scheduler row p (index of the l2_full counter; rows go expert by expert)
    l2_need  L2: number of L1 tiles of row p that must be complete; else 0
``sm_offsets`` int32 [num_sms + 1], CSR: program s runs tiles[sm_offsets[s]:sm_offsets[s+1]].

Both MoE schedules walk Algorithm 1's pair structure: G instances of a CTA pair, instance g with
role r in {0, 1} runs on program 2g + r; cursor k_i strides by G over the P * P_i pairs of stream
i; pair k covers row p = k // P_i and N tiles n = 2 (k mod P_i) + r. They differ only in when a
program takes its next Linear-2 tile:
    interleaved(D)  when its Linear-1 cursor leads by at least D rows: p2 + D <= p1 (Algorithm 1);
    expert-wave     when its Linear-1 cursor has left the expert wave of row p2.
With ``group_rows`` = GM > 1 (``pair_order``) the pairs of each stream are walked GM rows at a time,
column-major inside each group of an expert's rows (the grouped raster of tiled GEMMs); GM = 1 is the
row-major walk above.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from xstage.errors import InputError, require_int

KIND_L1, KIND_L2, KIND_FA = 0, 1, 2
KIND_NAMES = {KIND_L1: "L1", KIND_L2: "L2", KIND_FA: "FA"}
# the int32 tiles[T, 8] contract, field by field (the kernels read the same order)
TILE_FIELDS = ("kind", "expert", "m_block", "n_block", "sm", "seq", "row", "l2_need")
TILE_KIND, TILE_EXPERT, TILE_M_BLOCK, TILE_N_BLOCK, TILE_SM, TILE_SEQ, TILE_ROW, TILE_L2_NEED = range(len(TILE_FIELDS))
TILE_COLUMNS = TILE_FIELDS     # the earlier name, kept for its callers
_INF = 1 << 62


@dataclass(frozen=True)
class MoeGrid:
    """The tile grid of one GPU's local experts: rows (BLOCK_M token blocks) and pairs per row."""
    rows_per_expert: tuple   # row blocks of each local expert (0 for an expert without tokens)
    l1_pairs: int            # P1: Linear-1 N-tile pairs per row (2 * P1 N tiles of BLOCK_N cover 2 * h_inter)
    l2_pairs: int            # P2: Linear-2 N-tile pairs per row (2 * P2 N tiles of BLOCK_N cover hidden)

    def __post_init__(self):
        rows = tuple(require_int("rows_per_expert", r, minimum=0) for r in self.rows_per_expert)
        if not rows or sum(rows) == 0:
            raise InputError("routing", list(rows), "is empty: no expert has any token")
        object.__setattr__(self, "rows_per_expert", rows)
        object.__setattr__(self, "l1_pairs", require_int("l1_pairs", self.l1_pairs))
        object.__setattr__(self, "l2_pairs", require_int("l2_pairs", self.l2_pairs))

    @property
    def rows(self) -> int:
        return sum(self.rows_per_expert)

    @property
    def first_row(self) -> np.ndarray:
        """O_e: the first row of each expert."""
        return np.concatenate([[0], np.cumsum(self.rows_per_expert)[:-1]]).astype(np.int64)

    @property
    def expert_of_row(self) -> np.ndarray:
        """e(p) for every row p."""
        return np.repeat(np.arange(len(self.rows_per_expert)), self.rows_per_expert)

    @property
    def l1_tiles_per_row(self) -> int:
        return 2 * self.l1_pairs

    @property
    def l2_tiles_per_row(self) -> int:
        return 2 * self.l2_pairs


def moe_grid(tokens_per_expert, *, hidden: int, intermediate: int, block_m: int = 128,
             block_n: int = 128) -> MoeGrid:
    """The grid for the given tokens per local expert and FFN shape (Linear-1: hidden -> 2*inter)."""
    hidden = require_int("hidden", hidden)
    intermediate = require_int("intermediate", intermediate)
    block_m = require_int("block_m", block_m)
    block_n = require_int("block_n", block_n)
    if intermediate % block_n:
        raise InputError("block_n", block_n, f"must divide intermediate={intermediate} "
                         "(Linear-1 N tiles come in pairs over 2 * intermediate columns)")
    if hidden % (2 * block_n):
        raise InputError("block_n", block_n, f"must divide hidden/2={hidden / 2:g} "
                         "(Linear-2 N tiles come in pairs over hidden columns)")
    tokens = [require_int("tokens_per_expert", t, minimum=0) for t in tokens_per_expert]
    rows = tuple(-(-t // block_m) for t in tokens)
    return MoeGrid(rows, intermediate // block_n, hidden // (2 * block_n))


@dataclass
class Schedule:
    """Per-program ordered tile lists, stored as the exported arrays."""
    name: str
    tiles: np.ndarray          # int32 [T, 8]
    sm_offsets: np.ndarray     # int32 [num_sms + 1]
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        self.tiles = np.ascontiguousarray(self.tiles, dtype=np.int32)
        self.sm_offsets = np.ascontiguousarray(self.sm_offsets, dtype=np.int32)
        check_arrays(self.tiles, self.sm_offsets)

    @property
    def num_sms(self) -> int:
        return len(self.sm_offsets) - 1

    def column(self, name: str) -> np.ndarray:
        return self.tiles[:, TILE_FIELDS.index(name)]

    def sm_tiles(self, sm: int) -> np.ndarray:
        return self.tiles[self.sm_offsets[sm]:self.sm_offsets[sm + 1]]

    def to_arrays(self) -> dict:
        return {"tiles": self.tiles.copy(), "sm_offsets": self.sm_offsets.copy()}

    @classmethod
    def from_arrays(cls, tiles, sm_offsets, name: str = "custom", params: dict | None = None) -> "Schedule":
        return cls(name, np.asarray(tiles), np.asarray(sm_offsets), dict(params or {}))

    def save(self, path) -> Path:
        import json
        path = Path(path)
        if path.suffix != ".npz":
            raise InputError("output", str(path), "must end in .npz")
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, tiles=self.tiles, sm_offsets=self.sm_offsets,
                 meta=np.array(json.dumps({"name": self.name, "params": self.params}, default=str)))
        return path

    @classmethod
    def load(cls, path) -> "Schedule":
        import json
        path = Path(path)
        if not path.exists():
            raise InputError("schedule", str(path), "does not exist")
        with np.load(path, allow_pickle=False) as data:
            if "tiles" not in data or "sm_offsets" not in data:
                raise InputError("schedule", str(path), "must hold the arrays tiles and sm_offsets")
            meta = json.loads(str(data["meta"])) if "meta" in data else {"name": "custom", "params": {}}
            return cls(meta["name"], data["tiles"], data["sm_offsets"], meta.get("params", {}))

    def check_covers(self, grid: MoeGrid) -> None:
        """Every L1 and L2 tile of ``grid`` appears exactly once (raises InputError otherwise)."""
        check_covers(self.tiles, grid)


def check_arrays(tiles: np.ndarray, sm_offsets: np.ndarray) -> None:
    """Structural checks of the exported arrays (shape, CSR, sm/seq columns, kinds, no duplicates)."""
    if tiles.ndim != 2 or tiles.shape[1] != len(TILE_FIELDS):
        raise InputError("tiles", tiles.shape, f"must have shape [T, {len(TILE_FIELDS)}]")
    if sm_offsets.ndim != 1 or len(sm_offsets) < 2:
        raise InputError("sm_offsets", sm_offsets.shape, "must have shape [num_sms + 1] with num_sms >= 1")
    if sm_offsets[0] != 0 or sm_offsets[-1] != len(tiles) or np.any(np.diff(sm_offsets) < 0):
        raise InputError("sm_offsets", sm_offsets[:8].tolist(), f"must rise from 0 to T={len(tiles)}")
    counts = np.diff(sm_offsets)
    sm = np.repeat(np.arange(len(counts)), counts)
    if not np.array_equal(tiles[:, TILE_SM], sm):
        raise InputError("tiles sm column", "", "must match sm_offsets")
    seq = np.arange(len(tiles)) - np.repeat(sm_offsets[:-1], counts)
    if not np.array_equal(tiles[:, TILE_SEQ], seq):
        raise InputError("tiles seq column", "", "must count 0, 1, ... within each program")
    if len(tiles) and (tiles[:, TILE_KIND].min() < 0 or tiles[:, TILE_KIND].max() > KIND_FA):
        raise InputError("tiles kind", sorted(set(tiles[:, TILE_KIND].tolist())), "must be 0 (L1), 1 (L2) or 2 (FA)")
    t64 = tiles.astype(np.int64)
    if len(tiles) and (t64[:, TILE_EXPERT:TILE_N_BLOCK + 1].min() < 0 or t64[:, TILE_EXPERT:TILE_N_BLOCK + 1].max() >= 1 << 20):
        raise InputError("tiles expert/m_block/n_block", "", "must lie in [0, 2**20)")
    key = np.sort((t64[:, TILE_KIND] << 60) | (t64[:, TILE_EXPERT] << 40) | (t64[:, TILE_M_BLOCK] << 20)
                  | t64[:, TILE_N_BLOCK])
    if np.any(key[1:] == key[:-1]):
        raise InputError("tiles", "", "must not repeat a (kind, expert, m_block, n_block) tile")
    l2 = tiles[:, TILE_KIND] == KIND_L2
    if np.any(tiles[l2, TILE_L2_NEED] <= 0) or np.any(tiles[~l2, TILE_L2_NEED] != 0):
        raise InputError("tiles l2_need", "", "must be > 0 on L2 tiles and 0 elsewhere")


def check_covers(tiles: np.ndarray, grid: MoeGrid) -> None:
    first = grid.first_row
    want = []
    for e, rows in enumerate(grid.rows_per_expert):
        for m in range(rows):
            p = first[e] + m
            want += [(KIND_L1, e, m, n, p) for n in range(grid.l1_tiles_per_row)]
            want += [(KIND_L2, e, m, n, p) for n in range(grid.l2_tiles_per_row)]
    got = sorted(map(tuple, tiles[:, [TILE_KIND, TILE_EXPERT, TILE_M_BLOCK, TILE_N_BLOCK, TILE_ROW]].tolist()))
    if got != sorted(want):
        raise InputError("schedule", f"{len(got)} tiles", f"must cover the grid's {len(want)} tiles exactly once")
    if np.any(tiles[tiles[:, TILE_KIND] == KIND_L2, TILE_L2_NEED] != grid.l1_tiles_per_row):
        raise InputError("tiles l2_need", "", f"must equal the {grid.l1_tiles_per_row} L1 tiles of a row")


# --- the two MoE schedules -------------------------------------------------------------------

def _merge_literal(grid: MoeGrid, pairs: int, take_l2) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1's loop, line by line, for every (g, r); ``take_l2(p1, p2)`` decides L2 over L1.

    The reference for ``_merge`` (which computes the same order with array operations)."""
    P, P1, P2 = grid.rows, grid.l1_pairs, grid.l2_pairs
    expert = grid.expert_of_row
    first = grid.first_row
    need = grid.l1_tiles_per_row
    n1, n2 = P * P1, P * P2
    out, offsets = [], [0]
    for g in range(pairs):
        for r in (0, 1):
            sm = 2 * g + r
            seq = 0
            k1 = k2 = g
            while k1 < n1 or k2 < n2:
                p1 = k1 // P1 if k1 < n1 else _INF
                p2 = k2 // P2
                if k2 < n2 and take_l2(p1, p2):
                    e = expert[p2]
                    out.append((KIND_L2, e, p2 - first[e], 2 * (k2 % P2) + r, sm, seq, p2, need))
                    k2 += pairs
                else:
                    e = expert[p1]
                    out.append((KIND_L1, e, p1 - first[e], 2 * (k1 % P1) + r, sm, seq, p1, 0))
                    k1 += pairs
                seq += 1
            offsets.append(len(out))
    tiles = np.array(out, dtype=np.int32).reshape(-1, len(TILE_FIELDS))
    return tiles, np.array(offsets, dtype=np.int32)


def pair_order(grid: MoeGrid, pairs_per_row: int, group_rows: int = 1) -> tuple:
    """(row, pair column, group's first row, group's last row) of every pair k of one stream, in stream order.

    ``group_rows`` = 1: row-major (k -> row k // P, column k mod P), Algorithm 1 as printed. With
    ``group_rows`` = GM, each expert's rows go in groups of GM (the last group of an expert smaller, never
    straddling experts) and a group's pairs go column-major: the CTAs running side by side share GM rows
    of activations and few weight columns (the grouped raster of tiled GEMMs: weight columns stay in L2).
    """
    P = pairs_per_row
    if group_rows == 1:
        k = np.arange(grid.rows * P)
        return k // P, k % P, k // P, k // P
    rows, cols, first, last = [], [], [], []
    for r0, n in zip(grid.first_row, grid.rows_per_expert):
        for g0 in range(int(r0), int(r0 + n), group_rows):
            gs = min(group_rows, int(r0 + n) - g0)
            q = np.arange(gs * P)
            rows.append(g0 + q % gs)
            cols.append(q // gs)
            first.append(np.full(gs * P, g0))
            last.append(np.full(gs * P, g0 + gs - 1))
    return tuple(np.concatenate(a) for a in (rows, cols, first, last))


def _merge(grid: MoeGrid, pairs: int, threshold: np.ndarray, group_rows: int = 1,
           balance: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1's merge with array operations.

    The loop takes L2 pair k2 (row p2) as soon as the next L1 pair's row p1 >= threshold[p2]
    (interleaved: p2 + D; expert-wave: the end row of p2's wave). Both cursors rise monotonically,
    so L2 pair j lands after exactly the L1 pairs with p1 < threshold[p2(j)]. With ``group_rows`` > 1
    (``pair_order``) p1 is the first row of the L1 pair's group and an L2 pair's threshold is that of
    its group's last row: both stay monotonic, and D counts rows past the end of an L2 pair's group.
    ``balance``: the L2 pairs are dealt starting at the CTA pair after the last one that got an extra L1 pair
    (pair g takes L2 pairs (g - P*P1 mod pairs) mod pairs, + pairs, ...), so no pair gets both remainders: the
    most loaded pair has at most one tile pair over the mean instead of two. Every pair's own order is
    Algorithm 1's merge as before; only which L2 pairs a CTA pair owns changes.
    """
    P, P1, P2 = grid.rows, grid.l1_pairs, grid.l2_pairs
    expert = grid.expert_of_row
    first = grid.first_row
    need = grid.l1_tiles_per_row
    row1, col1, start1, _ = pair_order(grid, P1, group_rows)
    row2, col2, _, last2 = pair_order(grid, P2, group_rows)
    blocks, offsets = [], [0]
    shift = (P * P1) % pairs if balance else 0
    for g in range(pairs):
        k1 = np.arange(g, P * P1, pairs)
        k2 = np.arange((g - shift) % pairs, P * P2, pairs)
        p1 = start1[k1]
        before = np.searchsorted(p1, threshold[last2[k2]], side="left")   # L1 pairs emitted before each L2 pair
        pos2 = before + np.arange(len(k2))
        n = len(k1) + len(k2)
        is_l2 = np.zeros(n, dtype=bool)
        is_l2[pos2] = True
        rowcol = np.empty(n, dtype=np.int64)
        kcol = np.empty(n, dtype=np.int64)
        rowcol[pos2], kcol[pos2] = row2[k2], col2[k2]
        rowcol[~is_l2], kcol[~is_l2] = row1[k1], col1[k1]
        e = expert[rowcol]
        for r in (0, 1):
            t = np.empty((n, len(TILE_FIELDS)), dtype=np.int32)
            t[:, TILE_KIND] = np.where(is_l2, KIND_L2, KIND_L1)
            t[:, TILE_EXPERT] = e
            t[:, TILE_M_BLOCK] = rowcol - first[e]
            t[:, TILE_N_BLOCK] = 2 * kcol + r
            t[:, TILE_SM] = 2 * g + r
            t[:, TILE_SEQ] = np.arange(n)
            t[:, TILE_ROW] = rowcol
            t[:, TILE_L2_NEED] = np.where(is_l2, need, 0)
            blocks.append(t)
            offsets.append(offsets[-1] + n)
    tiles = np.concatenate(blocks) if blocks else np.zeros((0, len(TILE_FIELDS)), dtype=np.int32)
    return tiles, np.array(offsets, dtype=np.int32)


def _grid_params(grid: MoeGrid) -> dict:
    return {"rows": grid.rows, "l1_pairs": grid.l1_pairs, "l2_pairs": grid.l2_pairs,
            "rows_per_expert": list(grid.rows_per_expert)}


def _check_pairs(pairs) -> int:
    return require_int("pairs", pairs)


def interleaved(grid: MoeGrid, pairs: int, lead_rows: int, group_rows: int = 1, balance: bool = False) -> Schedule:
    """Algorithm 1: emit L2 of row p2 when the L1 cursor leads by D rows (p2 + D <= p1); ``group_rows``:
    ``pair_order``; ``balance``: ``_merge``."""
    pairs = _check_pairs(pairs)
    D = require_int("lead_rows (D)", lead_rows, minimum=0)
    G = require_int("group_rows", group_rows)
    tiles, offsets = _merge(grid, pairs, np.arange(grid.rows) + D, G, bool(balance))
    return Schedule("interleaved", tiles, offsets, {"pairs": pairs, "lead_rows": D, "num_sms": 2 * pairs,
                                                    **({"group_rows": G} if G > 1 else {}),
                                                    **({"balance": True} if balance else {}), **_grid_params(grid)})


WAVE_IMBALANCE = 16.0


def default_waves(grid: MoeGrid, num_sms: int, *, avg_rows_per_expert: float | None = None,
                  imbalance: float = WAVE_IMBALANCE) -> list[int]:
    """Experts per wave the way DeepGEMM's MegaMoE heuristic picks them (routing-blind).

    From the *average* row blocks per expert (default: the grid's mean), the L1 N tiles of one
    expert; enough experts that a wave holds ``imbalance`` x num_sms L1 tiles; equal-size waves of
    that many consecutive experts (the last one partial). Skewed routing therefore puts hot experts'
    extra rows into a wave of the same expert count, making its Linear-2 run longer (paper Sec. 5.2.1).
    """
    E = len(grid.rows_per_expert)
    avg = grid.rows / E if avg_rows_per_expert is None else avg_rows_per_expert
    per_expert = max(avg, 1e-9) * grid.l1_tiles_per_row
    w = int(min(E, max(1, -(-imbalance * num_sms // per_expert))))
    return [w] * (E // w) + ([E % w] if E % w else [])


def expert_wave(grid: MoeGrid, pairs: int, wave_experts=None, avg_rows_per_expert: float | None = None,
                group_rows: int = 1, balance: bool = False) -> Schedule:
    """Expert-wave: a wave's L1 work, then its L2 work, then the next wave (per program order).

    ``wave_experts``: experts per wave, an int (all waves) or a list; default ``default_waves``.
    ``group_rows``: ``pair_order``; ``balance``: ``_merge``.
    """
    pairs = _check_pairs(pairs)
    G = require_int("group_rows", group_rows)
    E = len(grid.rows_per_expert)
    if wave_experts is None:
        sizes = default_waves(grid, 2 * pairs, avg_rows_per_expert=avg_rows_per_expert)
    elif isinstance(wave_experts, (int, np.integer)):
        w = require_int("wave_experts", wave_experts)
        sizes = [w] * (E // w) + ([E % w] if E % w else [])
    else:
        sizes = [require_int("wave_experts", w) for w in wave_experts]
    if sum(sizes) != E:
        raise InputError("wave_experts", sizes, f"must add up to the {E} local experts")
    bounds = np.cumsum(sizes)                       # expert index where each wave ends
    wave_of_expert = np.repeat(np.arange(len(sizes)), sizes)
    wave_end_row = np.concatenate([[0], np.cumsum(grid.rows_per_expert)])[bounds]
    end_of_row = wave_end_row[wave_of_expert[grid.expert_of_row]]
    tiles, offsets = _merge(grid, pairs, end_of_row, G, bool(balance))
    return Schedule("expert_wave", tiles, offsets, {"pairs": pairs, "wave_experts": sizes, "num_sms": 2 * pairs,
                                                    **({"group_rows": G} if G > 1 else {}),
                                                    **({"balance": True} if balance else {}), **_grid_params(grid)})


def make_moe_schedule(kind: str, grid: MoeGrid, num_sms: int, *, lead_rows: int = 1, wave_experts=None,
                      avg_rows_per_expert: float | None = None, group_rows: int = 1, balance: bool = False) -> Schedule:
    """``kind`` = expert_wave | interleaved on ``num_sms`` programs (an even number: CTA pairs);
    ``group_rows``: rows walked side by side (``pair_order``; 1 = Algorithm 1's row-major walk);
    ``balance``: the remainders of the L1 and L2 deals on different CTA pairs (``_merge``)."""
    num_sms = require_int("num_sms", num_sms)
    if num_sms % 2:
        raise InputError("num_sms", num_sms, "must be even (Algorithm 1 runs CTA pairs)")
    if kind in ("interleaved", "int"):
        return interleaved(grid, num_sms // 2, lead_rows, group_rows, balance)
    if kind in ("expert_wave", "wave"):
        return expert_wave(grid, num_sms // 2, wave_experts, avg_rows_per_expert, group_rows, balance)
    raise InputError("schedule", kind, "must be expert_wave or interleaved")


def deadlock_free(schedule: Schedule) -> bool:
    """True when every program can finish its order: L2 tiles only wait for L1 tiles that can run."""
    t = schedule.tiles
    off = schedule.sm_offsets
    pos = off[:-1].astype(np.int64).copy()
    done = np.zeros(int(t[:, TILE_ROW].max()) + 1 if len(t) else 1, dtype=np.int64)
    waiting: dict[int, list[int]] = {}
    stack = list(range(schedule.num_sms))
    while stack:
        s = stack.pop()
        while pos[s] < off[s + 1]:
            kind, row, need = t[pos[s], TILE_KIND], t[pos[s], TILE_ROW], t[pos[s], TILE_L2_NEED]
            if kind == KIND_L2 and done[row] < need:
                waiting.setdefault(int(row), []).append(s)
                break
            if kind == KIND_L1:
                done[row] += 1
                if int(row) in waiting:
                    stack.extend(waiting.pop(int(row)))
            pos[s] += 1
    return bool(np.all(pos == off[1:]))
