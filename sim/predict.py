"""Predict a FlashAttention kernel's All-to-All exposure from the outside: its FA-only time and tile shape.

A user who has a FlashAttention kernel (FA4, cuDNN, the project's Triton kernel, anything that writes
b_m x d output tiles from a grid of CTAs) knows its FA-only time and its tile shape, not its per-SM
tensor rate. ``FaKernel`` holds exactly that; ``predict_fa`` derives the per-tile Q-loop from the
measured time and replays the fused kernel on a platform's X-Stage:

    tiles      H * M / b_m output tiles, dealt to the programs in order (``sim.schedule_fa.fa_qloop``:
               a static or hardware tile order, one tile per program at a time)
    Q-loop     fa_us / ceil(tiles / programs) when ``fa_us`` is given (uniform tiles: the FA-only
               makespan is waves x Q-loop), else the platform's tensor rate (``fa_timing``)
    bytes      b_m * d * out_bytes per tile that crosses the X-Stage: with the Ulysses layout the rows
               of sequence chunk j go to rank j, so the tiles of this rank's own chunk stay local and
               the other (W - 1) / W of the tiles are remote (``remote_fraction`` = None, the default);
               a number instead scales every tile's bytes uniformly
    send       ``tile_end``: each tile's bytes are issued when its Q-loop ends (FA4 writing straight into
               the receive layout); ``stagger``: the project's staggered send (``staggered_mainloops``)
    cover      one K/V step of the next Q-loop may run before the previous tile's issue ends (Eq. 17)
    SM stage   ``exit_waits_for_drain`` (off by default; today's one-stage X-Stage otherwise): a tile's bytes
               leave its SM at most at ``sm_store_GBps`` (r_sm) into a small shared buffer
               (``shared_buffer_MiB``, Q_eff) drained at the platform's R, and the program's next tile (for a
               non-persistent kernel: the next CTA on that SM, since a CTA cannot exit before its TMA store
               has left shared memory) starts only when they have left: no cover window. The defaults are
               the MoE tile logs' two-stage figures (``benchmarks/moe_magnitudes.py``: r_sm = 1.065 GB/s =
               one L2 tile's 32.8 KB per its 30.8 us mainloop slow-down, Q_eff = 0.78 MiB), fitted on no
               FlashAttention kernel, so every FA record judges them held out.

Kernel structure (defaults: today's model): ``order`` (``local_last``: the own chunk's tiles last, as the
project's Triton kernel walks them), ``tail_parts`` / ``fa_tail_parts`` (the fused and the FA-only kernel's
split tail: each tile of the last, partial wave as that many K/V parts, only the last part storing; the
Q-loop is fa_us over the FA-only kernel's makespan in Q-loops) and ``program_spread`` /
``fa_program_spread`` (persistent programs that run at different speeds, evenly spread over that range, so
that they drift apart wave after wave: the per-wave growth of a tile log's end-time range over its Q-loop),
``mainloop_factor`` (the fused kernel's own Q-loop over the FA-only kernel's, before any remote store: its code,
not the X-Stage; a tile log's first wave or a run into local memory measures it) and ``sm_pool_GBps`` (the
SMs' stores share one rate, so an SM storing alone gets more of it than one of 132: ``ReplayConfig``) and
``send_step_offset`` (K/V steps added to the stagger's due step: 1 for the persistent FA4 ``stagger`` kernel) and
``hold`` (``issue``: the SM waits for a store's bytes to leave before its next mainloop, today's; ``next_epilogue``:
only at its next epilogue, as the persistent FA4 kernels' code does: ``_hold_us``), ``stagger_span`` (the sends
spread over 1 / span of the window: 2, today's; 1: FA4's ``stagger1`` kernels) and ``due_over`` (what the due
step counts: ``tile``, the next tile's K/V steps, today's; ``unit`` / ``window``, the FA4 split kernels' next unit
or send window across partner units: ``sim.predict_sends``).

The fused time is the later of the last issue end and the last byte drained (a kernel is not done
while its system-memory writes are in flight). E_res = fused - FA-only; the hiding ratio is
1 - E_res / (remote bytes / R), the share of a serial transfer at the drain rate that the fusion hides.
"""

import math
from dataclasses import dataclass, replace

import numpy as np

from xstage.errors import InputError, require_int, require_positive
from xstage.sim.platform import Platform
from xstage.sim.replay import ReplayConfig, replay
from xstage.sim.predict_sends import DUE_OVER, split_send_mainloops, unit_steps
from xstage.sim.predict_sends import hold_us as _hold_us, staggered_items as _staggered
from xstage.sim.schedule_fa import ORDERS, SEND_SLOTS, fa_work_items
from xstage.sim.schedules import TILE_COLUMNS

SENDS = ("tile_end", "stagger")
HOLDS = ("issue", "next_epilogue")
MOE_SM_STORE_GBPS = 1.065    # r_sm from the MoE tile logs (benchmarks/moe_magnitudes.py), 2026-12-01
MOE_SHARED_BUFFER_MIB = 0.78  # Q_eff from the same logs


@dataclass(frozen=True)
class FaKernel:
    seq_len: int
    heads: int = 3
    head_dim: int = 128
    block_m: int = 128
    block_n: int = 128
    out_bytes: int = 2
    world_size: int = 8
    rank: int = 0
    remote_fraction: float | None = None   # None: the Ulysses layout (own chunk local)
    fa_us: float | None = None             # measured FA-only time; None: the platform's tensor rate
    send: str = "tile_end"
    num_sms: int | None = None             # programs; default the platform's SMs
    efficiency: float = 0.70               # share of the per-SM bf16 rate, used only without fa_us
    qloop_fixed_us: float = 1.0            # per-tile fixed cost, used only without fa_us
    exit_waits_for_drain: bool = False     # the SM-side stage (module docstring); False: today's model
    sm_store_GBps: float = MOE_SM_STORE_GBPS        # r_sm, used only with exit_waits_for_drain
    shared_buffer_MiB: float = MOE_SHARED_BUFFER_MIB  # Q_eff, used only with exit_waits_for_drain
    order: str = "head_major"              # tile order: head_major (fa_qloop) | local_last (own chunk last)
    tail_parts: int = 1                    # the fused kernel's split tail: K/V parts per last-wave tile (1: none)
    fa_tail_parts: int = 1                 # the same for the FA-only kernel whose time fa_us is
    program_spread: float = 0.0            # full range of the programs' Q-loop speeds (share; 0: all equal)
    fa_program_spread: float | None = None  # the same for the FA-only kernel (None: program_spread)
    spread_seed: int = 0                   # which program gets which speed (a seeded permutation)
    mainloop_factor: float = 1.0           # the fused kernel's Q-loop over the FA-only kernel's (its own code)
    sm_pool_GBps: float | None = None      # the SMs' stores share this rate (ReplayConfig.sm_pool_GBps); None: off
    send_step_offset: int = 0              # K/V steps added to the stagger's due step (1: PersistentSm90Stagger)
    hold: str = "issue"                    # where a store holds its SM: issue (today) | next_epilogue (_hold_us)
    stagger_span: int = 2                  # the stagger's sends spread over 1 / span of the window (1: FA4 stagger1)
    due_over: str = "tile"                 # the due step counts: tile (today) | unit | window (sim.predict_sends)

    def __post_init__(self):
        for name in ("seq_len", "heads", "head_dim", "block_m", "block_n", "out_bytes", "world_size"):
            require_int(name, getattr(self, name))
        require_int("rank", self.rank, minimum=0)
        if self.rank >= self.world_size:
            raise InputError("rank", self.rank, f"must be < world_size={self.world_size}")
        if self.seq_len % self.block_m or self.seq_len % self.block_n:
            raise InputError("seq_len", self.seq_len,
                             f"must be a multiple of block_m={self.block_m} and block_n={self.block_n}")
        if self.seq_len % (self.world_size * self.block_m):
            raise InputError("seq_len", self.seq_len,
                             f"must split into world_size={self.world_size} chunks of whole {self.block_m}-row tiles")
        if self.remote_fraction is not None and not 0.0 <= float(self.remote_fraction) <= 1.0:
            raise InputError("remote_fraction", self.remote_fraction, "must be in [0, 1]")
        if self.fa_us is not None:
            require_positive("fa_us", self.fa_us)
        if self.send not in SENDS:
            raise InputError("send", self.send, f"must be one of {', '.join(SENDS)}")
        if self.num_sms is not None:
            require_int("num_sms", self.num_sms)
        require_positive("efficiency", self.efficiency)
        require_positive("qloop_fixed_us", self.qloop_fixed_us, allow_zero=True)
        if not isinstance(self.exit_waits_for_drain, bool):
            raise InputError("exit_waits_for_drain", self.exit_waits_for_drain, "must be true or false")
        require_positive("sm_store_GBps", self.sm_store_GBps)
        require_positive("shared_buffer_MiB", self.shared_buffer_MiB)
        if self.order not in ORDERS:
            raise InputError("order", self.order, f"must be one of {', '.join(ORDERS)}")
        for name in ("program_spread", "fa_program_spread"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and 0.0 <= float(v) < 1.0):
                raise InputError(name, v, "must be in [0, 1)")
        require_int("spread_seed", self.spread_seed, minimum=0)
        require_positive("mainloop_factor", self.mainloop_factor)
        if self.sm_pool_GBps is not None:
            require_positive("sm_pool_GBps", self.sm_pool_GBps)
        off = require_int("send_step_offset", self.send_step_offset, minimum=0)
        if off and self.send != "stagger":
            raise InputError("send_step_offset", off, "only applies with send=stagger")
        span = require_int("stagger_span", self.stagger_span)
        if span != 2 and self.send != "stagger":
            raise InputError("stagger_span", span, "only applies with send=stagger")
        if self.due_over not in DUE_OVER:
            raise InputError("due_over", self.due_over, f"must be one of {', '.join(DUE_OVER)}")
        if self.due_over != "tile" and (self.send != "stagger" or self.hold != "issue"):
            raise InputError("due_over", self.due_over, "needs send=stagger and hold=issue")
        if self.due_over == "tile" and (off or span != 2) and \
                off + (SEND_SLOTS - 1) * self.kv_steps // (span * SEND_SLOTS) >= self.kv_steps:
            raise InputError("send_step_offset", off, f"puts the last due step past the {self.kv_steps} K/V steps")
        if self.hold not in HOLDS:
            raise InputError("hold", self.hold, f"must be one of {', '.join(HOLDS)}")
        if self.hold != "issue" and self.tail_parts != 1:
            raise InputError("hold", self.hold, "needs tail_parts = 1 (a split tile's parts have no epilogue each)")
        for name in ("tail_parts", "fa_tail_parts"):
            v = require_int(name, getattr(self, name))
            if v > self.kv_steps:
                raise InputError(name, v, f"must be <= the {self.kv_steps} K/V steps (one per part)")

    @property
    def tile_bytes(self) -> int:
        return self.block_m * self.head_dim * self.out_bytes

    @property
    def kv_steps(self) -> int:
        return self.seq_len // self.block_n


def tile_remote_bytes(k: FaKernel, schedule, owner=None) -> np.ndarray:
    """Remote bytes per item, in schedule order (only a split tile's owning part stores)."""
    T = len(schedule.tiles)
    own = np.ones(T, dtype=bool) if owner is None else np.asarray(owner, dtype=bool)
    if k.remote_fraction is not None:
        return np.where(own, k.tile_bytes * float(k.remote_fraction), 0.0)
    m_block = schedule.tiles[:, TILE_COLUMNS.index("m_block")].astype(np.int64)
    chunk = m_block * k.block_m // (k.seq_len // k.world_size)
    return np.where((chunk == k.rank) | ~own, 0.0, float(k.tile_bytes))


def work_items(k: FaKernel, programs: int, parts: int):
    """(schedule, each item's share of a whole tile, owner mask) of ``k``'s tiles on ``programs`` programs, the
    last partial wave in ``parts`` (``schedule_fa.fa_work_items``)."""
    return fa_work_items(k.heads, k.seq_len, programs, block_m=k.block_m, order=k.order,
                         world_size=k.world_size, rank=k.rank, tail_parts=parts)


def program_factors(k: FaKernel, programs: int, spread: float | None = None) -> np.ndarray:
    """Each program's Q-loop relative to the slowest program's: evenly spaced over [1 - spread, 1], dealt to
    the programs by a seeded permutation (persistent programs keep their SM, so fast ones stay fast and the
    programs drift apart wave after wave, as the tile logs show). The slowest program runs at the reference
    Q-loop, so a kernel whose programs run in lockstep (spread 0) runs all of them at the FA-only kernel's
    slowest pace: its makespan's."""
    spread = k.program_spread if spread is None else spread
    if not spread or programs == 1:
        return np.ones(programs)
    u = np.random.default_rng(k.spread_seed).permutation(programs) / (programs - 1)
    return 1.0 - float(spread) * u


def qloop_us(k: FaKernel, platform: Platform, tiles: int, programs: int, fa_waves: float) -> float:
    """One whole tile's Q-loop: the measured FA-only time over its makespan in Q-loops (``fa_waves``:
    ceil(tiles / programs) without a split tail), else the platform's tensor rate."""
    if k.fa_us is not None:
        return float(k.fa_us) / fa_waves
    rate = platform.tensor_rate_per_sm_TFLOPs("bf16") * 1e6 * k.efficiency   # FLOP per us
    return k.qloop_fixed_us + k.kv_steps * 4.0 * k.block_m * k.block_n * k.head_dim / rate


def sm_stage_platform(platform: Platform, sm_store_GBps: float, shared_buffer_MiB: float) -> Platform:
    """``platform`` as a two-stage X-Stage (platform schema version 2): each producer's bytes leave its SM
    at r_sm (``sm_store_GBps``) into a shared buffer of Q_eff (``shared_buffer_MiB``, the same at every K,
    no per-SM slots of its own) drained at the platform's R (the MoE two-stage replay)."""
    return replace(platform, sm_store_GBps=float(sm_store_GBps), sm_outstanding_bytes=None,
                   capacity_points=((1, shared_buffer_MiB * 2**20),))


def predict_fa(k: FaKernel, platform: Platform) -> dict:
    """FA-only and fused replays of ``k`` on ``platform``: times, residual exposure and hiding ratio."""
    programs = k.num_sms or platform.sm_count
    fa_sched, fa_share, _ = work_items(k, programs, k.fa_tail_parts)
    schedule, share, owner = work_items(k, programs, k.tail_parts)
    T = int(owner.sum())
    nbytes = tile_remote_bytes(k, schedule, owner)
    K = min(programs, len(share))
    cfg = ReplayConfig(staging_slots=0, cover_us=0.0, remote_epilogue_us=0.0, local_epilogue_us=0.0,
                       record_occupancy=False, producers=K)
    # the FA-only makespan in Q-loops (every item a share of one Q-loop, nothing stored: linear in the Q-loop)
    sm = TILE_COLUMNS.index("sm")
    fa_share = fa_share * program_factors(k, programs, k.fa_program_spread)[fa_sched.tiles[:, sm]]
    share = share * program_factors(k, programs)[schedule.tiles[:, sm]]
    fa_waves = replay(fa_sched, fa_share, np.zeros(len(fa_share)), platform, cfg).makespan_us
    qloop = qloop_us(k, platform, T, programs, fa_waves)
    stage = sm_stage_platform(platform, k.sm_store_GBps, k.shared_buffer_MiB) if k.exit_waits_for_drain \
        else platform
    cfg = replace(cfg, cover_us=0.0 if k.exit_waits_for_drain else qloop / k.kv_steps)
    only = replay(fa_sched, fa_share * qloop, np.zeros(len(fa_share)), platform, cfg)
    ml = share * qloop * float(k.mainloop_factor)
    hold = _hold_us(k, schedule, ml)
    if k.send == "stagger" and k.due_over == "tile":
        ml = _staggered(k, schedule, ml)
    elif k.send == "stagger":
        ml, nbytes = split_send_mainloops(schedule, ml, nbytes, owner, unit_steps(schedule, share, k.kv_steps),
                                          k.due_over, k.stagger_span, k.send_step_offset)
    fused = replay(schedule, ml, nbytes, stage, replace(cfg, sm_pool_GBps=k.sm_pool_GBps), cover_per_tile_us=hold)
    fa_us = only.makespan_us
    fused_us = max(fused.makespan_us, fused.drain_end_us)
    a2a_us = float(nbytes.sum()) / platform.drain_rate_Bpus
    e_res = fused_us - fa_us
    return {
        "M": k.seq_len, "heads": k.heads, "head_dim": k.head_dim, "block_m": k.block_m, "block_n": k.block_n,
        "world_size": k.world_size, "send": k.send, "tiles": T, "programs": programs,
        "waves": math.ceil(T / programs), "qloop_us": qloop, "order": k.order, "tail_parts": k.tail_parts,
        "fa_tail_parts": k.fa_tail_parts, "program_spread": k.program_spread,
        "fa_program_spread": k.program_spread if k.fa_program_spread is None else k.fa_program_spread,
        "mainloop_factor": k.mainloop_factor, "sm_pool_GBps": k.sm_pool_GBps, "tile_bytes": k.tile_bytes,
        **({"send_step_offset": k.send_step_offset} if k.send_step_offset else {}),
        **({"hold": k.hold} if k.hold != "issue" else {}),
        **({"stagger_span": k.stagger_span} if k.stagger_span != 2 else {}),
        **({"due_over": k.due_over} if k.due_over != "tile" else {}),
        "remote_MiB": float(nbytes.sum()) / 2**20, "a2a_us": a2a_us,
        "fa_us": fa_us, "fused_us": fused_us, "serial_us": fa_us + a2a_us, "E_res_us": e_res,
        "hiding_ratio": 1.0 - e_res / a2a_us if a2a_us > 0 else float("nan"),
        "speedup_vs_serial": (fa_us + a2a_us) / fused_us,
        "fused_peak_queue_MiB": fused.peak_queue_bytes / 2**20, "platform": platform.name,
        "fa_us_source": "measured" if k.fa_us is not None else "platform tensor rate",
        "exit_waits_for_drain": k.exit_waits_for_drain,
        **({"sm_store_GBps": k.sm_store_GBps, "shared_buffer_MiB": k.shared_buffer_MiB}
           if k.exit_waits_for_drain else {}),
    }
