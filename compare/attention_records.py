"""Records of the FlashAttention–A2A runs: kernel rows (one per variant and M), tile rows (one per
output tile, from the instrumented kernel), and the per-M summary of §5.3.

Records of W ranks (``attention_dist``) hold one row per variant, M and rank; the summary reduces
them by the maximum over ranks (the slowest rank sets the step time).

Pure pandas/numpy: the GPU side hands over plain numbers and arrays.
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.errors import InputError
from xstage.provenance import provenance
from xstage.records import COLUMNS, atomic_write_text, load_records, save_records

EXPERIMENT = "attention"
FOLDERS = ("attention", "attention-dist")  # under the data folder: one GPU (emulated ranks), W GPUs
SUMMARY_KEYS = ("platform", "world_size", "M")  # one summary row per key
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
    local head; ``bytes_remote`` counts the tile's bytes sent to other ranks (0 for FA-only); ``split``
    marks a tile computed as two K/V halves (its times are those of the half that merged and stored it).
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
        "split": log[:, 7].astype(bool), "M": cfg.seq_len,
    })
    return frame[COLUMNS["tile"] + [c for c in frame.columns if c not in COLUMNS["tile"]]]


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


def variant_times(group: pd.DataFrame) -> pd.Series:
    """``time(us)`` per variant of one M: the last row per (variant, rank), then the maximum over ranks."""
    keys = ["variant", "rank"] if "rank" in group else ["variant"]
    return group.drop_duplicates(keys, keep="last").groupby("variant", sort=False)["time(us)"].max()


def summary_rows(kernel: pd.DataFrame) -> list:
    """One row per (platform, W, M): times of every variant (the slowest rank's), E_res, hiding ratio H
    (Eq. 21) and speedups."""
    if kernel.empty:
        return []
    rows = []
    keys = [k for k in SUMMARY_KEYS if k in kernel]
    for key, group in kernel.groupby(keys, sort=True):
        times = variant_times(group)
        if all(v.endswith("_tune") for v in times.index):  # tuning rows only
            continue
        first = group.iloc[0]
        M = dict(zip(keys, key))["M"]
        row = {"M": int(M), "heads": int(first["heads"]), "head_dim": int(first["head_dim"]),
               "world_size": int(first["world_size"])}
        if "platform" in group:
            row["platform"] = str(first["platform"])
        row["ranks"] = int(group["rank"].nunique()) if "rank" in group else 1
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
        row.update(_paired(group))
        rows.append(row)
    return rows


def _paired(group: pd.DataFrame) -> dict:
    """E_res and H from matched pairs (``attention_bench.paired_differences``: each difference from two
    back-to-back launches, median over pairs; column ``paired_minus_fa(us)`` of each variant's row),
    where the run recorded them; over ranks, the largest."""
    col = "paired_minus_fa(us)"
    if col not in group:
        return {}
    d = group.dropna(subset=[col]).groupby("variant")[col].max()
    if "fused" not in d or "serial" not in d:
        return {}
    out = {"e_res_paired_us": float(d["fused"]),
           "hiding_ratio_paired": 1.0 - float(d["fused"]) / float(d["serial"]) if d["serial"] else float("nan")}
    for variant in d.index:
        if variant.startswith("fused_"):  # the other fused options, fused_hbm (no remote stores) among them
            out[f"e_res_paired_{variant[len('fused_'):]}_us"] = float(d[variant])
    return out


TABLE_COLUMNS = ("M", "fa_us", "serial_us", "fused_us", "serial_best_us", "sdpa_us", "fa_tflops", "sdpa_tflops",
                 "fa_vs_sdpa", "e_res_us", "hiding_ratio", "e_res_paired_us", "hiding_ratio_paired",
                 "e_res_paired_hbm_us", "speedup_vs_serial", "speedup_vs_serial_best")


def summary_table(kernel_rows: list, extra: tuple = ()) -> str:
    """The per-M summary of kernel rows (tuning rows left out) as a printable table."""
    measured = [r for r in kernel_rows if not r["variant"].endswith("_tune")]
    table = pd.DataFrame(summary_rows(pd.DataFrame(measured)))
    cols = [c for c in TABLE_COLUMNS + tuple(extra) if c in table]
    return table[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}") if len(table) else "(no rows)"


def load_kernel_records(folder, platform: str | None = None) -> pd.DataFrame:
    """All attention kernel records under ``folder`` (a folder or a list of them; files in name order,
    later files win)."""
    frames = []
    folders = [folder] if isinstance(folder, (str, Path)) else list(folder)
    for path in (p for f in folders for p in sorted(Path(f).glob("*.parquet"))):
        frame, meta = load_records(path)
        if meta.get("kind") == "kernel" and (frame["experiment"] == EXPERIMENT).all():
            frames.append(frame)
    if not frames:
        raise InputError("attention records", [str(f) for f in folders],
                         "hold no attention kernel records (*.parquet)")
    kernel = pd.concat(frames, ignore_index=True)
    if platform is not None:
        kernel = kernel[kernel["platform"] == platform]
        if kernel.empty:
            raise InputError("--platform", platform, f"has no attention records in {[str(f) for f in folders]}")
    return kernel


def summarize(data_dir: Path, platform: str | None = None) -> list:
    """``xstage results attention``: summary rows from ``data_dir/attention`` (one GPU) and
    ``data_dir/attention-dist`` (W GPUs), whichever exist."""
    folders = [Path(data_dir) / name for name in FOLDERS if (Path(data_dir) / name).is_dir()]
    if not folders:
        raise InputError("data", str(Path(data_dir) / EXPERIMENT),
                         f"does not exist (nor {FOLDERS[1]}/: no attention records committed)")
    return summary_rows(load_kernel_records(folders, platform))


def save_run(out_dir: Path, kernel_rows: list, tiles: list, checks: list, config: dict, overwrite: bool) -> list:
    """Kernel records, tile records (when any) and the checks JSON of one run under ``out_dir``."""
    meta = {"config": config, "provenance": provenance(with_gpu=True)}
    paths = [save_records(Path(out_dir) / "attention-kernel.parquet", "kernel", pd.DataFrame(kernel_rows), meta,
                          overwrite=overwrite)]
    if tiles:
        paths.append(save_records(Path(out_dir) / "attention-tile.parquet", "tile",
                                  pd.concat(tiles, ignore_index=True), meta, overwrite=overwrite))
    paths.append(atomic_write_text(Path(out_dir) / "attention-checks.json",
                                   json.dumps(checks, indent=1, default=str), overwrite=overwrite))
    return paths
