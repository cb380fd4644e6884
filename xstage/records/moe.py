"""MoE record building: kernel rows (one per configuration and variant, and rank on W GPUs), tile rows
(one per tile of an instrumented launch), the measured medians the simulator is later replayed with
(``measured_columns``, ``measured(l1_us)`` -> ``measured_l1(us)``: ``xstage.compare.moe_records.resimulate``
fills ``sim_*``), and the files of one
run. Used by the GPU benches (``xstage.hw.moe``); summaries are ``xstage.compare.moe_records``.

Tile rows: the "tile" schema (times in us from the launch's first timestamp) plus ``row``,
``dep_wait(us)``, ``span(us)`` (= issue_end - issue_start: T_RS for L2 tiles),
``gap_to_next(us)`` (this tile's mainloop end to the program's next mainloop start). ``mma_stall``:
the kernel has no separate epilogue role, so the MMA role waits for the whole epilogue: the time
from the previous tile's mainloop end to this tile's wait start.
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.errors import InputError
from xstage.provenance import this_gpu_platform
from xstage.records import COLUMNS, atomic_write_text, save_records
from xstage.records.spelling import column_name
from xstage.records.kernel import timed_row

EXPERIMENT = "moe"
PLATFORM = "h200-pcie-host"   # the name rows carried before session 23, and still where torch sees no GPU
SCHEDULES = ("expert_wave", "interleaved")


def kernel_row(problem, variant: str, times_us, *, platform: str | None = None, **extra) -> dict:
    """One kernel record row from the per-trial times (us) of ``variant`` on ``problem`` (a ``MoeProblem``)."""
    platform = platform or this_gpu_platform()
    return timed_row(EXPERIMENT, problem.label(), variant, times_us, flops=problem.flops, platform=platform,
                     **{**problem.to_dict(), **extra})


def tile_frame(layout, tiles: np.ndarray, log: np.ndarray, *, schedule: str, remote: bool,
               platform: str | None = None) -> pd.DataFrame:
    """Tile records from an int64 [T, 8] log (``xstage.hw.moe.buffers.TILE_LOG_FIELDS``) of ``tiles``."""
    platform = platform or this_gpu_platform()
    log = np.asarray(log, dtype=np.int64)
    tiles = np.asarray(tiles)
    if log.shape != (len(tiles), 8):
        raise InputError("tile log shape", log.shape, f"must be ({len(tiles)}, 8)")
    t0 = log[:, 3].min()
    us = lambda col: (log[:, col] - t0) / 1e3  # noqa: E731 - ns -> us
    kind = np.where(tiles[:, 0] == 1, "L2", "L1")
    frame = pd.DataFrame({
        "source": "hw", "platform": platform, "experiment": EXPERIMENT, "config": layout.problem.label(),
        "schedule": schedule if remote else f"{schedule}_local", "sm": tiles[:, 4], "seq": tiles[:, 5],
        "kind": kind, "expert": tiles[:, 1], "m": tiles[:, 2], "n": tiles[:, 3],
        "bytes_remote": layout.tile_remote_bytes(tiles) if remote else 0,
        "mainloop_start(us)": us(4), "mainloop_end(us)": us(5), "issue_start(us)": us(6), "issue_end(us)": us(7),
        "row": tiles[:, 6], "dep_wait(us)": us(4) - us(3), "hw_sm": log[:, 1], "wait_start(us)": us(3)})
    frame["span(us)"] = frame["issue_end(us)"] - frame["issue_start(us)"]
    frame = frame.sort_values(["sm", "seq"], kind="stable").reset_index(drop=True)
    nxt = frame.groupby("sm")["mainloop_start(us)"].shift(-1)
    frame["gap_to_next(us)"] = nxt - frame["mainloop_end(us)"]
    prev_end = frame.groupby("sm")["mainloop_end(us)"].shift(1)
    frame["mma_stall(us)"] = (frame["wait_start(us)"] - prev_end).fillna(0.0)
    return frame[COLUMNS["tile"] + [c for c in frame.columns if c not in COLUMNS["tile"]]]


def tile_timings(frame: pd.DataFrame) -> dict:
    """Medians from a local-store tile frame: mainloop times and epilogue spans per kind (us)."""
    out = {}
    for kind in ("L1", "L2"):
        k = frame[frame["kind"] == kind]
        out[f"{kind.lower()}_us"] = float((k["mainloop_end(us)"] - k["mainloop_start(us)"]).median())
        out[f"{kind.lower()}_epilogue_us"] = float(k["span(us)"].median())
    return out


def measured(key: str) -> str:
    """The kernel record column of the local-store median ``key`` of ``tile_timings``: ``l1_us`` ->
    ``measured_l1(us)``."""
    return column_name(f"measured_{key}")


def measured_columns(timings: dict) -> dict:
    """``measured_<median>(us)`` columns from ``{schedule: tile_timings(local-store tile frame)}``: each median
    averaged over the schedules (none without timings: the interpreter cannot log tiles)."""
    if not timings:
        return {}
    keys = timings[SCHEDULES[0]]
    return {measured(k): float(np.mean([timings[sc][k] for sc in SCHEDULES])) for k in keys}


def same_order(a, b) -> bool:
    """True when two schedules walk the same tiles in the same order on the same programs."""
    a, b = a.to_arrays(), b.to_arrays()
    return all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)


def save_run(out_dir: Path, rows: list, tiles: list, checks: list, meta: dict, overwrite: bool) -> list:
    """Kernel records, tile records (when any, and a small copy to commit) and the checks JSON of one run."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [save_records(out_dir / "moe-kernel.parquet", "kernel", pd.DataFrame(rows), meta, overwrite=overwrite)]
    if tiles:
        frame = pd.concat(tiles, ignore_index=True)
        paths.append(save_records(out_dir / "moe-tile.parquet", "tile", frame, meta, overwrite=overwrite))
        # a copy small enough to commit (< 2 MiB): the first two configurations, float32 times
        small = frame[frame["config"].isin(frame["config"].drop_duplicates().iloc[:2])].copy()
        for col in small.columns:
            if small[col].dtype == "float64":
                small[col] = small[col].astype("float32")
        paths.append(save_records(out_dir / "moe-tile-small.parquet", "tile", small, meta, overwrite=overwrite))
    paths.append(atomic_write_text(out_dir / "moe-checks.json", json.dumps(checks, indent=1, default=str),
                                   overwrite=overwrite))
    return paths
