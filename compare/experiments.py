"""Measured records named on a command line beside the simulator: ``xstage compare RECORDS``.

    grouped = load_arguments([Path("data/moe")])        # {kind: frame}; calibration folders -> "points"
    rows, metrics = compare_records(grouped)             # side by side, with an ``experiment`` column

Calibration folders (``data/calibration/<platform>``) or their points.parquet: every measured
configuration re-simulated from its aggregate figures (T_iss, period, measured gap).
Burst records: every (mode, K, B, G) experiment re-simulated with the calibrated platform.
Kernel records: attention (per M: fused time, E_res, speedup), FA4 attention (per run, M and fused
variant: the same, paired E_res and H) and MoE (per configuration: expert-wave
and interleaved times, speedup and its sign). Tile records: MoE tiles re-simulated per configuration
(span / stall / makespan summaries), FlashAttention tiles beside their Q-loop replay (issue spans).
Other records (summaries, copy-engine rows) are skipped.
"""

from pathlib import Path

import pandas as pd

from xstage.compare import attention as att
from xstage.compare import moe as moe_cmp
from xstage.compare.bursts import (burst_error_summary, compare_bursts, compare_points,
                                   load_calibration_points, platform_for)
from xstage.compare.frames import load_files, scan_records
from xstage.compare.metrics import error_summary
from xstage.compare.moe_records import replay_hw_tiles
from xstage.compare.replays import simulate_moe_tiles
from xstage.compare.tiles import compare_tile_summaries
from xstage.errors import InputError
from xstage.records import declares

# experiment label -> the metrics entry that summarizes it
METRICS = {"calibration points": "calibration points", "bursts": "bursts", "attention": "attention", "moe": "moe",
           "attention fa4": "attention_fa4", "attention tiles": "attention_tiles", "tiles": "tiles"}


def compare_parts(grouped: dict, platform=None, data_dir=None, progress=None) -> tuple[dict, dict]:
    """{kind: frame} of measured records -> ({experiment: side-by-side rows}, {metrics name: metrics})."""
    parts, metrics = {}, {}

    def plat_of(frame):
        if platform is not None or "platform" not in frame.columns:
            return platform_for(frame, platform or "paper-b200", data_dir)
        return platform_for(frame, None, data_dir)

    if "points" in grouped:   # calibration folders: aggregate figures per configuration (points.parquet)
        pts = grouped["points"]
        rows = pd.concat([compare_points(grp, platform_for(grp, platform, data_dir), progress=progress)
                          for _, grp in pts.groupby("platform", sort=True)], ignore_index=True)
        metrics["calibration points"] = burst_error_summary(rows)
        parts["calibration points"] = rows
    if "burst" in grouped:
        b = grouped["burst"]
        rows = compare_bursts(b, plat_of(b), progress=progress)
        metrics["bursts"] = burst_error_summary(rows)
        parts["bursts"] = rows
    if "kernel" in grouped:
        k = grouped["kernel"]
        if (k["experiment"] == "attention").any():
            a = k[k["experiment"] == "attention"]
            rows = att.compare_attention(a, plat_of(a))
            metrics["attention"] = att.attention_error_summary(rows)
            parts["attention"] = rows
        if (k["experiment"] == att.FA4_EXPERIMENT).any():
            a = k[k["experiment"] == att.FA4_EXPERIMENT]
            rows = att.compare_fa4(a, plat_of(a))
            if len(rows):
                metrics["attention_fa4"] = att.attention_error_summary(rows)
                parts["attention fa4"] = rows
        if (k["experiment"] == "moe").any():
            m = k[k["experiment"] == "moe"]
            rows = moe_cmp.compare_moe(m, plat_of(m), progress=progress)
            metrics["moe"] = moe_cmp.moe_error_summary(rows)
            parts["moe"] = rows
        others = sorted(set(k["experiment"].astype(str)) - {"attention", att.FA4_EXPERIMENT, "moe"})
        if others:
            metrics["skipped"] = {"kernel experiments without a simulated counterpart": others}
    if "tile" in grouped:
        t = grouped["tile"]
        moe_tiles = t[(t["experiment"] == "moe") & (t["source"] != "sim")]
        att_tiles = t[(t["experiment"] == "attention") & (t["source"] != "sim")]
        if len(att_tiles) and "M" in att_tiles:
            kern = grouped.get("kernel")
            rows = att.compare_attention_tiles(att_tiles, plat_of(att_tiles),
                                               kern[kern["experiment"] == "attention"] if kern is not None else None)
            if len(rows):
                metrics["attention_tiles"] = error_summary(rows["measured_span_median(us)"],
                                                           rows["simulated_span_median(us)"], name="span_median")
                parts["attention tiles"] = rows
        if len(moe_tiles):
            plat = plat_of(moe_tiles)
            configs = sorted(set(moe_tiles["config"]))
            hw = [c for c in configs if "/" not in c]  # hardware runs: MoeProblem labels; catalog names have "/"
            sims = [simulate_moe_tiles(c, plat)[0] for c in configs if c not in hw]
            if hw:
                kern = grouped.get("kernel")
                sims.append(replay_hw_tiles(moe_tiles[moe_tiles["config"].isin(hw)], kern if kern is not None and
                                            (kern["experiment"] == "moe").any() else None, plat))
            rows = compare_tile_summaries(moe_tiles, pd.concat(sims, ignore_index=True))
            metrics["tiles"] = error_summary(rows["measured_span_median(us)"], rows["simulated_span_median(us)"],
                                             name="span_median")
            parts["tiles"] = rows
    if not parts:
        raise InputError("RECORDS", sorted(grouped), "hold no burst, attention / moe kernel or moe tile records "
                         "to compare")
    return parts, metrics


def compare_records(grouped: dict, platform=None, data_dir=None, progress=None) -> tuple[pd.DataFrame, dict]:
    """{kind: frame} of measured records -> (side-by-side rows with an ``experiment`` column, metrics)."""
    parts, metrics = compare_parts(grouped, platform, data_dir, progress)
    return pd.concat([rows.assign(experiment=name) for name, rows in parts.items()], ignore_index=True,
                     sort=False), metrics


def load_arguments(paths) -> dict:
    """{kind: frame} from RECORDS: files, or folders. A calibration folder (or a ``points.parquet`` named
    directly) gives its calibration points, under ``points``, and not its sampled burst records; any
    other folder gives every record file under it."""
    files, points = [], []
    for path in paths:
        if path.is_dir():
            if (path / "points.parquet").is_file() and declares(path / "points.parquet", "point"):
                points.append(load_calibration_points(path / "points.parquet"))
                files += [Path(p) for p in scan_records(path)["path"]
                          if Path(p).parent == path and Path(p).name not in ("points.parquet", "bursts.parquet",
                                                                             "check.parquet", "copy.parquet")]
            else:
                files += [Path(p) for p in scan_records(path)["path"]]
        elif path.name == "points.parquet" and declares(path, "point"):
            points.append(load_calibration_points(path))
        else:
            files.append(path)
    if not files and not points:
        raise InputError("RECORDS", [str(p) for p in paths], "hold no record files")
    grouped = load_files(files) if files else {}
    if points:
        grouped["points"] = pd.concat(points, ignore_index=True)
    return grouped
