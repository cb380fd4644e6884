"""Records of the FlashAttention–A2A runs: kernel rows (one per variant and M), tile rows (one per
output tile, from the instrumented kernel), and the per-M summary of §5.3.

Pure pandas/numpy: the GPU side hands over plain numbers and arrays.
"""

from pathlib import Path

import numpy as np
import pandas as pd

from xstage.errors import InputError
from xstage.records import COLUMNS, load_records

EXPERIMENT = "attention"
PLATFORM = "h200-pcie-host"
# variant → summary column; the sender-side times of §5.3
VARIANT_COLUMNS = {"fa": "fa_us", "serial": "serial_us", "fused": "fused_us", "serial_best": "serial_best_us",
                   "sdpa": "sdpa_us", "a2a": "a2a_us", "ce": "ce_us", "fused_instr": "fused_instr_us"}


def kernel_row(cfg, variant: str, times_us, *, platform: str = PLATFORM, **extra) -> dict:
    """One kernel record row from the per-trial times (us) of ``variant`` on ``cfg``."""
    times = np.asarray(times_us, dtype=float)
    if times.size == 0:
        raise InputError("times_us", [], "must hold at least one trial")
    median = float(np.median(times))
    lay = cfg.layout
    row = {"source": "hw", "experiment": EXPERIMENT, "config": cfg.label(), "variant": variant,
           "time(us)": median, "trials": int(times.size), "platform": platform,
           "M": cfg.seq_len, "heads": cfg.heads, "head_dim": cfg.head_dim, "world_size": cfg.world_size,
           "rank": cfg.rank, "block_m": cfg.block_m, "block_n": cfg.block_n, "num_warps": cfg.num_warps,
           "num_stages": cfg.num_stages, "flops": cfg.flops, "TFLOPs": cfg.flops / median / 1e6,
           "bytes_total": lay.total_bytes, "bytes_remote": lay.remote_bytes,
           "time_min(us)": float(times.min()), "time_p25(us)": float(np.percentile(times, 25)),
           "time_p75(us)": float(np.percentile(times, 75)), "time_max(us)": float(times.max())}
    row.update(extra)
    return row


def tile_frame(cfg, log, *, schedule: str, platform: str = PLATFORM) -> pd.DataFrame:
    """Tile records from a (tiles, 8) int64 tile log (fields ``attention.TILE_LOG_FIELDS``).

    Times are in us from the earliest Q-loop start of the launch; ``m`` is the m-block, ``n`` the
    local head; ``bytes_remote`` counts the tile's bytes sent to other ranks (0 for FA-only).
    """
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
        "M": cfg.seq_len,
    })
    return frame[COLUMNS["tile"] + [c for c in frame.columns if c not in COLUMNS["tile"]]]


def summary_rows(kernel: pd.DataFrame) -> list:
    """One row per M: times of every variant, E_res, hiding ratio H (Eq. 21) and speedups."""
    if kernel.empty:
        return []
    rows = []
    for M, group in kernel.groupby("M", sort=True):
        times = group.drop_duplicates("variant", keep="last").set_index("variant")["time(us)"]
        first = group.iloc[0]
        row = {"M": int(M), "heads": int(first["heads"]), "head_dim": int(first["head_dim"]),
               "world_size": int(first["world_size"])}
        for variant, col in VARIANT_COLUMNS.items():
            row[col] = float(times[variant]) if variant in times else float("nan")
        for variant in times.index:  # the other measured variants (e.g. fused_wb, serial_best_cudnn)
            if variant not in VARIANT_COLUMNS and not variant.endswith("_tune"):
                row[f"{variant}_us"] = float(times[variant])
        if "store_cache" in group and "fused" in times:
            row["store_cache"] = group.loc[group["variant"] == "fused", "store_cache"].iloc[-1]
        flops = float(first["flops"])
        fa, serial, fused, best = row["fa_us"], row["serial_us"], row["fused_us"], row["serial_best_us"]
        row["fa_tflops"] = flops / fa / 1e6
        row["sdpa_tflops"] = flops / row["sdpa_us"] / 1e6
        row["fa_vs_sdpa"] = row["sdpa_us"] / fa
        row["e_res_us"] = fused - fa
        row["hiding_ratio"] = 1.0 - (fused - fa) / (serial - fa) if serial != fa else float("nan")
        row["speedup_vs_serial"] = serial / fused
        row["speedup_vs_serial_best"] = best / fused
        rows.append(row)
    return rows


def load_kernel_records(folder: Path, platform: str | None = None) -> pd.DataFrame:
    """All attention kernel records under ``folder`` (files in name order; later files win)."""
    frames = []
    for path in sorted(Path(folder).glob("*.parquet")):
        frame, meta = load_records(path)
        if meta.get("kind") == "kernel" and (frame["experiment"] == EXPERIMENT).all():
            frames.append(frame)
    if not frames:
        raise InputError("attention records", str(folder), "holds no attention kernel records (*.parquet)")
    kernel = pd.concat(frames, ignore_index=True)
    if platform is not None:
        kernel = kernel[kernel["platform"] == platform]
        if kernel.empty:
            raise InputError("--platform", platform, f"has no attention records in {folder}")
    return kernel


def summarize(data_dir: Path, platform: str | None = None) -> list:
    """``xstage results attention``: summary rows from ``data_dir/attention``."""
    folder = Path(data_dir) / EXPERIMENT
    if not folder.is_dir():
        raise InputError("data", str(folder), "does not exist (no attention records committed)")
    return summary_rows(load_kernel_records(folder, platform))
