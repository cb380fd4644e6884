"""Workload catalog: MoE configurations (the paper's 84) and FlashAttention shapes, plus routing.

The catalog lives in ``sim/catalog/*.json`` with a source or assumption for every number. A
``MoeConfig`` names one cell of the paper's matrix: model x precision x routing x setting, at EP = 8.
``moe_workload`` turns it into what the replay needs: the tile grid of the simulated GPU (the most
loaded rank), per-tile mainloop times from a compute model, and per-tile Combine bytes.

Compute model: a tile's mainloop takes FLOPs / (per-SM tensor rate for the precision x efficiency);
L1 tile = 2 b_m b_n hidden FLOPs, L2 tile = 2 b_m b_n h_inter, FA KV step = 4 b_m b_n d. Measured
per-tile times override it (``mainloop_override_us={"L1": .., "L2": ..}``).
"""

import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources

import numpy as np

from xstage.errors import InputError, require_int, require_positive
from xstage.sim.platform import Platform
from xstage.sim.schedules import KIND_L1, KIND_L2, MoeGrid, Schedule, moe_grid

PRECISIONS = ("w4a8", "w8a8")
ROUTINGS = ("balanced", "skewed")


@lru_cache(maxsize=None)
def _catalog(name: str) -> dict:
    return json.loads((resources.files("xstage.sim") / "catalog" / name).read_text())


def moe_catalog() -> dict:
    return _catalog("moe_models.json")


def fa_catalog() -> dict:
    return _catalog("fa_shapes.json")


@dataclass(frozen=True)
class MoeConfig:
    model: str
    precision: str = "w8a8"
    routing: str = "skewed"
    setting: str = "L"
    seed: int = 0

    def __post_init__(self):
        cat = moe_catalog()
        if self.model not in cat["models"]:
            raise InputError("model", self.model, f"is unknown (catalog: {', '.join(cat['models'])})")
        if self.precision not in cat["precisions"]:
            raise InputError("precision", self.precision, f"must be one of {', '.join(cat['precisions'])}")
        if self.routing not in ROUTINGS:
            raise InputError("routing", self.routing, f"must be one of {', '.join(ROUTINGS)}")
        if self.setting not in cat["settings"]:
            raise InputError("setting", self.setting, f"must be one of {', '.join(cat['settings'])}")
        require_int("seed", self.seed, minimum=0)

    @property
    def name(self) -> str:
        return f"{self.model}/{self.precision}/{self.routing}/{self.setting}"


def parse_config(name: str) -> MoeConfig:
    """``MODEL/PRECISION/ROUTING/SETTING`` (missing trailing parts take the defaults)."""
    parts = str(name).split("/")
    if not parts[0] or len(parts) > 4:
        raise InputError("config", name, "must be MODEL[/PRECISION[/ROUTING[/SETTING]]], e.g. DSv4-Pro/w8a8/skewed/L")
    keys = ("model", "precision", "routing", "setting")
    return MoeConfig(**dict(zip(keys, parts)))


def moe_configs() -> list[MoeConfig]:
    """The 84 configurations: 7 models x 2 precisions x 2 routings x 3 settings."""
    cat = moe_catalog()
    return [MoeConfig(m, p, r, s) for m in cat["models"] for p in cat["precisions"] for r in ROUTINGS
            for s in cat["settings"]]


# --- routing ---------------------------------------------------------------------------------

def route(tokens_total: int, experts: int, top_k: int, routing: str, seed: int = 0,
          hot_fraction: float = 0.125, hot_share: float = 0.5) -> np.ndarray:
    """Token-expert assignments per expert (length ``experts``), seeded.

    balanced: every expert gets the same count (remainder to the first ones).
    skewed:   a persistent hot set of round(hot_fraction * experts) experts, drawn once from the seed,
              receives ``hot_share`` of the assignments; counts are a seeded multinomial draw.
    """
    tokens_total = require_int("tokens", tokens_total, minimum=0)
    experts = require_int("experts", experts)
    top_k = require_int("top_k", top_k)
    if top_k > experts:
        raise InputError("top_k", top_k, f"must be <= experts={experts}")
    n = tokens_total * top_k
    if n == 0:
        raise InputError("routing", tokens_total, "is empty: no tokens to route")
    if routing == "balanced":
        counts = np.full(experts, n // experts, dtype=np.int64)
        counts[: n % experts] += 1
        return counts
    if routing != "skewed":
        raise InputError("routing", routing, f"must be one of {', '.join(ROUTINGS)}")
    rng = np.random.default_rng(seed)
    hot = rng.choice(experts, size=max(1, round(hot_fraction * experts)), replace=False)
    p = np.full(experts, (1 - hot_share) / max(experts - len(hot), 1))
    p[hot] = hot_share / len(hot)
    if len(hot) == experts:
        p[:] = 1 / experts
    return rng.multinomial(n, p / p.sum()).astype(np.int64)


def critical_rank(counts: np.ndarray, ranks: int) -> tuple[int, np.ndarray]:
    """The most loaded rank under contiguous expert placement and its local counts."""
    local = np.asarray(counts).reshape(ranks, -1)
    r = int(np.argmax(local.sum(axis=1)))
    return r, local[r]


# --- MoE workload ----------------------------------------------------------------------------

@dataclass
class MoeWorkload:
    config: MoeConfig
    grid: MoeGrid
    tokens_per_expert: np.ndarray
    shape: dict                     # hidden, intermediate, experts, top_k, block_m, block_n
    l1_us: float
    l2_us: float
    combine_bytes_per_row: float    # bytes one token row of one L2 N tile sends (block_n * elem)
    notes: dict = field(default_factory=dict)

    def schedule(self, kind: str, num_sms: int, *, lead_rows: int | None = None, wave_experts=None) -> Schedule:
        """expert_wave (DeepGEMM-style routing-blind waves) or interleaved (lead D, default max(1, D_knee))."""
        from xstage.sim.schedules import make_moe_schedule
        D = max(1, self.lead_knee_rows) if lead_rows is None else lead_rows
        return make_moe_schedule(kind, self.grid, num_sms, lead_rows=D, wave_experts=wave_experts,
                                 avg_rows_per_expert=self.notes["avg_rows_per_expert"])

    def mainloop_us(self, schedule: Schedule) -> np.ndarray:
        kind = schedule.column("kind")
        return np.where(kind == KIND_L1, self.l1_us, np.where(kind == KIND_L2, self.l2_us, 0.0))

    def remote_bytes(self, schedule: Schedule) -> np.ndarray:
        """Combine bytes of each L2 tile: valid token rows of its block x block_n x element size."""
        kind, expert, m = schedule.column("kind"), schedule.column("expert"), schedule.column("m_block")
        bm = self.shape["block_m"]
        valid = np.clip(self.tokens_per_expert[expert] - m * bm, 0, bm)
        return np.where(kind == KIND_L2, valid * self.combine_bytes_per_row, 0.0)

    def tile_frame(self, schedule: Schedule):
        """Per SM, its ordered tiles with mainloop time, burst bytes and dependency (l2_full row, need)."""
        import pandas as pd
        from xstage.sim.schedules import KIND_NAMES, TILE_COLUMNS
        frame = pd.DataFrame(schedule.tiles, columns=list(TILE_COLUMNS))
        frame["kind"] = frame["kind"].map(KIND_NAMES)
        frame["mainloop(us)"] = self.mainloop_us(schedule)
        frame["bytes_remote"] = self.remote_bytes(schedule)
        return frame

    @property
    def lead_knee_rows(self) -> int:
        """Eq. 16 with K_SM = the programs that run the kernel (set by ``moe_workload``)."""
        return self.notes["lead_knee_rows"]


def tile_time_us(flops: float, platform: Platform, tensor: str, efficiency: float) -> float:
    rate = platform.tensor_rate_per_sm_TFLOPs(tensor) * 1e6 * efficiency  # FLOP per us
    return flops / rate


def moe_workload(config: MoeConfig, platform: Platform, *, num_sms: int | None = None,
                 mainloop_override_us: dict | None = None, efficiency: float | None = None,
                 combine_bytes_per_tile: float | None = None) -> MoeWorkload:
    """The replay inputs of one configuration on ``platform``.

    ``combine_bytes_per_tile`` overrides the Combine volume of a full L2 tile (default
    block_m x block_n x element bytes); partial row blocks send proportionally less.
    """
    from xstage.sim import model
    cat = moe_catalog()
    m = cat["models"][config.model]
    tile = cat["tile"]
    prec = cat["precisions"][config.precision]
    bm, bn = tile["block_m"], tile["block_n"]
    ep = cat["expert_parallel"]
    if m["experts"] % ep:
        raise InputError("experts", m["experts"], f"must be divisible by EP={ep}")
    tokens = cat["settings"][config.setting]["tokens_total"]
    r = cat["routing"]
    counts = route(tokens, m["experts"], m["top_k"], config.routing, config.seed, r["hot_fraction"], r["hot_share"])
    rank, local = critical_rank(counts, ep)
    grid = moe_grid(local, hidden=m["hidden"], intermediate=m["intermediate"], block_m=bm, block_n=bn)
    eff = prec["efficiency"] if efficiency is None else efficiency
    l1 = tile_time_us(2.0 * bm * bn * m["hidden"], platform, prec["tensor"], eff)
    l2 = tile_time_us(2.0 * bm * bn * m["intermediate"], platform, prec["tensor"], eff)
    if mainloop_override_us:
        unknown = set(mainloop_override_us) - {"L1", "L2"}
        if unknown:
            raise InputError("mainloop_override_us", sorted(unknown), "keys must be L1 and L2")
        l1 = float(mainloop_override_us.get("L1", l1))
        l2 = float(mainloop_override_us.get("L2", l2))
    sms = num_sms or platform.sm_count - platform.sm_count % 2
    shape = {**{k: m[k] for k in ("hidden", "intermediate", "experts", "top_k")}, "block_m": bm, "block_n": bn,
             "local_experts": m["experts"] // ep, "ep": ep, "tokens_total": tokens}
    avg_rows = tokens * m["top_k"] / m["experts"] / bm
    notes = {"rank": rank, "avg_rows_per_expert": avg_rows, "remote_epilogue_us": tile["remote_epilogue_us"],
             "local_epilogue_us": tile["local_epilogue_us"], "efficiency": eff, "tensor": prec["tensor"],
             "weight_bytes": prec["weight_bytes"],
             "lead_knee_rows": model.lead_knee_rows(bn, sms, m["intermediate"])}
    per_row = bn * tile["combine_bytes_per_element"]
    if combine_bytes_per_tile is None:
        combine_bytes_per_tile = tile.get("combine_bytes_per_tile")
    if combine_bytes_per_tile is not None:
        per_row = require_positive("combine_bytes_per_tile", combine_bytes_per_tile) / bm
    return MoeWorkload(config, grid, local, shape, l1, l2, per_row, notes)


# --- FlashAttention workload -----------------------------------------------------------------

@dataclass(frozen=True)
class FaConfig:
    shape: str = "fa4"
    seq_len: int = 8192
    heads: int | None = None   # per rank; default from the catalog

    def __post_init__(self):
        if self.shape not in fa_catalog()["shapes"]:
            raise InputError("shape", self.shape, f"must be one of {', '.join(fa_catalog()['shapes'])}")
        require_int("seq_len", self.seq_len)
        if self.heads is not None:
            require_int("heads", self.heads)

    @property
    def heads_per_rank(self) -> int:
        return self.heads or fa_catalog()["heads_per_rank"]

    def with_seq(self, seq_len: int) -> "FaConfig":
        return replace(self, seq_len=seq_len)


def fa_timing(config: FaConfig, platform: Platform) -> dict:
    """Per-tile Q-loop time, KV step, cover window and burst bytes of an FA shape on ``platform``."""
    s = fa_catalog()["shapes"][config.shape]
    bm, bn, d = s["block_m"], s["block_n"], s["head_dim"]
    if config.seq_len % bm or config.seq_len % bn:
        raise InputError("seq_len", config.seq_len, f"must be a multiple of the tile sizes b_m={bm}, b_n={bn}")
    step = tile_time_us(4.0 * bm * bn * d, platform, "bf16", s["efficiency"])
    kv = math.ceil(config.seq_len / bn)
    return {"kv_step_us": step, "kv_tiles": kv, "qloop_us": s["qloop_fixed_us"] + kv * step,
            "cover_us": s["cover_kv_steps"] * step, "tile_bytes": bm * d * s["out_bytes"],
            "block_m": bm, "block_n": bn, "head_dim": d}
