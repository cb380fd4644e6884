"""Attention record building: kernel rows (one per variant and M, and rank on W GPUs), tile rows (one
per output tile of an instrumented launch), the alias rows of the fastest SDPA backend, and the files
of one run. Used by the GPU benches (``xstage.hw.attention``); summaries are ``xstage.compare.attention_records``.

Pure pandas/numpy: the GPU side hands over plain numbers and arrays.
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.errors import InputError
from xstage.provenance import this_gpu_platform
from xstage.records import COLUMNS, atomic_write_text, save_records
from xstage.records.kernel import timed_row

EXPERIMENT = "attention"
PLATFORM = "h200-pcie-host"   # the name rows carried before session 23, and still where torch sees no GPU


def kernel_row(cfg, variant: str, times_us, *, platform: str | None = None, **extra) -> dict:
    """One kernel record row from the per-trial times (us) of ``variant`` on ``cfg``."""
    platform = platform or this_gpu_platform()
    lay = cfg.layout
    return timed_row(EXPERIMENT, cfg.label(), variant, times_us, flops=cfg.flops, platform=platform,
                     M=cfg.seq_len, heads=cfg.heads, head_dim=cfg.head_dim, world_size=cfg.world_size, rank=cfg.rank,
                     block_m=cfg.block_m, block_n=cfg.block_n, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                     bytes_total=lay.total_bytes, bytes_remote=lay.remote_bytes, **extra)


def tile_frame(cfg, log, *, schedule: str, platform: str | None = None) -> pd.DataFrame:
    """Tile records from a (tiles, 8) int64 tile log (fields ``attention.TILE_LOG_FIELDS``).

    Times are in us from the earliest Q-loop start of the launch; ``m`` is the m-block, ``n`` the
    local head; ``bytes_remote`` counts the tile's bytes sent to other ranks (0 for FA-only); ``split``
    marks a tile computed as two K/V halves (its times are those of the half that merged and stored it).
    """
    platform = platform or this_gpu_platform()
    log = np.asarray(log, dtype=np.int64)
    plan = cfg.layout.tile_plan()
    if log.shape != (len(plan), 8):
        raise InputError("tile log shape", log.shape, f"must be ({len(plan)}, 8)")
    t0 = log[:, 3].min()
    to_us = lambda col: (log[:, col] - t0) / 1e3  # noqa: E731 - ns → us
    remote = plan["bytes_remote"].to_numpy() if schedule.startswith("fused") else np.zeros(len(plan), int)
    frame = pd.DataFrame({
        "source": "hw", "platform": platform, "experiment": EXPERIMENT, "config": cfg.label(),
        "schedule": schedule, "sm": log[:, 1], "seq": log[:, 2], "kind": "FA", "expert": -1,
        "m": plan["m_block"].to_numpy(), "n": plan["head"].to_numpy(), "bytes_remote": remote,
        "mainloop_start(us)": to_us(3), "mainloop_end(us)": to_us(4), "issue_start(us)": to_us(5),
        "issue_end(us)": to_us(6), "mma_stall(us)": np.nan,
        "program": log[:, 0], "tile": plan["tile"].to_numpy(), "dest_rank": plan["dest_rank"].to_numpy(),
        "split": log[:, 7].astype(bool), "M": cfg.seq_len,
    })
    return frame[COLUMNS["tile"] + [c for c in frame.columns if c not in COLUMNS["tile"]]]


def decode_clock_field(program_field) -> tuple:
    """(program, Q-loop SM cycles) from the ``program`` field of a tile log taken with ``launch_fa(...,
    tile_clocks=True)`` (``program | cycles << 16``; the cycles are %clock64 over the tile's Q-loop)."""
    f = np.asarray(program_field, dtype=np.int64)
    return f & 0xFFFF, f >> 16


def alias_best_backend(rows: list, backends, aliases=("sdpa", "serial_best")) -> list:
    """Rows naming the user's pick, the fastest SDPA backend: per M, the backend ``b`` whose ``sdpa_<b>``
    time (maximum over ranks) is least; every ``<alias>_<b>`` row is copied as ``<alias>`` with
    ``backend`` = b. Backends tie-break in the order given."""
    out = []
    for M in sorted({r["M"] for r in rows}):
        at = [r for r in rows if r["M"] == M]
        slowest = {b: max(r["time(us)"] for r in at if r["variant"] == f"sdpa_{b}") for b in backends
                   if any(r["variant"] == f"sdpa_{b}" for r in at)}
        if not slowest:
            continue
        best = min(slowest, key=slowest.get)
        out += [{**r, "variant": alias, "backend": best} for alias in aliases for r in at
                if r["variant"] == f"{alias}_{best}"]
    return out


def save_run(out_dir: Path, kernel_rows: list, tiles: list, checks: list, config: dict, overwrite: bool) -> list:
    """Kernel records, tile records (when any) and the checks JSON of one run under ``out_dir``."""
    from xstage.provenance import provenance

    meta = {"config": config, "provenance": provenance(with_gpu=True)}
    paths = [save_records(Path(out_dir) / "attention-kernel.parquet", "kernel", pd.DataFrame(kernel_rows), meta,
                          overwrite=overwrite)]
    if tiles:
        paths.append(save_records(Path(out_dir) / "attention-tile.parquet", "tile",
                                  pd.concat(tiles, ignore_index=True), meta, overwrite=overwrite))
    paths.append(atomic_write_text(Path(out_dir) / "attention-checks.json",
                                   json.dumps(checks, indent=1, default=str), overwrite=overwrite))
    return paths
