"""``xstage compare RECORDS... [--platform ...] [--out FILE]``: measured records beside the simulator.

Calibration folders (``data/calibration/<platform>``) or their points.parquet: every measured
configuration re-simulated from its aggregate figures (T_iss, period, measured gap).
Burst records: every (mode, K, B, G) experiment re-simulated with the calibrated platform.
Kernel records: attention (per M: fused time, E_res, speedup) and MoE (per configuration: expert-wave
and interleaved times, speedup and its sign). Tile records: MoE tiles re-simulated per configuration
(span / stall / makespan summaries), FlashAttention tiles beside their Q-loop replay (issue spans).
Other records (summaries, copy-engine rows) are skipped. Prints the table and the error metrics; ``--out``
writes the side-by-side rows as CSV or Parquet.
"""

import sys
from pathlib import Path

import pandas as pd

from xstage.errors import InputError


def register(sub):
    p = sub.add_parser("compare", help="measured records vs the simulator on the calibrated platform",
                       description="Load measured records, re-run the identical configurations on the simulator "
                                   "with the calibrated platform, print measured and simulated side by side with "
                                   "median / p90 relative error and speedup sign agreement.")
    p.add_argument("records", nargs="+", metavar="RECORDS", help="record files (.parquet or .csv)")
    p.add_argument("--platform", default=None,
                   help="platform name or .json (default: the records' own platform, bundled or calibrated)")
    p.add_argument("--data", default=None, help="records folder holding calibration/<platform>/platform.json")
    p.add_argument("--out", default=None, help="write the side-by-side rows to FILE.csv or FILE.parquet")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    from xstage.cli.common import add_json

    add_json(p, "print the error metrics as JSON")
    p.set_defaults(func=run)


def compare_records(grouped: dict, platform=None, data_dir=None, progress=None) -> tuple[pd.DataFrame, dict]:
    """{kind: frame} of measured records -> (side-by-side rows with an ``experiment`` column, metrics)."""
    from xstage.compare import attention as att
    from xstage.compare import moe as moe_cmp
    from xstage.compare.bursts import burst_error_summary, compare_bursts, compare_points, platform_for
    from xstage.compare.metrics import error_summary
    from xstage.compare.replays import simulate_moe_tiles
    from xstage.compare.tiles import compare_tile_summaries
    from xstage.compare.moe_records import replay_hw_tiles

    parts, metrics = [], {}

    def plat_of(frame):
        if platform is not None or "platform" not in frame.columns:
            return platform_for(frame, platform or "paper-b200", data_dir)
        return platform_for(frame, None, data_dir)

    if "points" in grouped:   # calibration folders: aggregate figures per configuration (points.parquet)
        pts = grouped["points"]
        rows = pd.concat([compare_points(grp, platform_for(grp, platform, data_dir), progress=progress)
                          for _, grp in pts.groupby("platform", sort=True)], ignore_index=True)
        metrics["calibration points"] = burst_error_summary(rows)
        parts.append(rows.assign(experiment="calibration points"))
    if "burst" in grouped:
        b = grouped["burst"]
        rows = compare_bursts(b, plat_of(b), progress=progress)
        metrics["bursts"] = burst_error_summary(rows)
        parts.append(rows.assign(experiment="bursts"))
    if "kernel" in grouped:
        k = grouped["kernel"]
        if (k["experiment"] == "attention").any():
            a = k[k["experiment"] == "attention"]
            rows = att.compare_attention(a, plat_of(a))
            metrics["attention"] = att.attention_error_summary(rows)
            parts.append(rows.assign(experiment="attention"))
        if (k["experiment"] == "moe").any():
            m = k[k["experiment"] == "moe"]
            rows = moe_cmp.compare_moe(m, plat_of(m), progress=progress)
            metrics["moe"] = moe_cmp.moe_error_summary(rows)
            parts.append(rows.assign(experiment="moe"))
        others = sorted(set(k["experiment"].astype(str)) - {"attention", "moe"})
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
                parts.append(rows.assign(experiment="attention tiles"))
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
            parts.append(rows.assign(experiment="tiles"))
    if not parts:
        raise InputError("RECORDS", sorted(grouped), "hold no burst, attention / moe kernel or moe tile records "
                         "to compare")
    return pd.concat(parts, ignore_index=True, sort=False), metrics


def load_arguments(paths) -> dict:
    """{kind: frame} from RECORDS: files, or folders. A calibration folder (or a ``points.parquet`` named
    directly) gives its calibration points, under ``points``, and not its sampled burst records; any
    other folder gives every record file under it."""
    from xstage.compare.bursts import is_points, load_calibration_points
    from xstage.compare.frames import load_files, record_kind, scan_records

    files, points = [], []
    for path in paths:
        if path.is_dir():
            if (path / "points.parquet").is_file() and record_kind(path / "points.parquet") == "summary":
                points.append(load_calibration_points(path / "points.parquet"))
                files += [Path(p) for p in scan_records(path)["path"]
                          if Path(p).parent == path and Path(p).name not in ("points.parquet", "bursts.parquet",
                                                                             "check.parquet", "copy.parquet")]
            else:
                files += [Path(p) for p in scan_records(path)["path"]]
        elif path.name == "points.parquet" and record_kind(path) == "summary":
            points.append(load_calibration_points(path))
        else:
            files.append(path)
    if not files and not points:
        raise InputError("RECORDS", [str(p) for p in paths], "hold no record files")
    grouped = load_files(files) if files else {}
    if points:
        frame = pd.concat(points, ignore_index=True)
        if is_points(frame):
            grouped["points"] = frame
    return grouped


def run(args) -> int:
    from tqdm import tqdm

    from xstage.cli import print_json
    from xstage.records import atomic_write_text

    from xstage.cli.common import check_output, progress_enabled

    out = check_output("--out", args.out, overwrite=args.overwrite, suffixes=(".csv", ".parquet")) if args.out else None
    grouped = load_arguments([Path(p) for p in args.records])
    bars = progress_enabled(args)  # only on a terminal, never with --json
    progress = lambda items: tqdm(items, desc="simulate", unit="exp", file=sys.stderr,  # noqa: E731
                                  disable=not bars or len(items) < 4, dynamic_ncols=True)
    rows, metrics = compare_records(grouped, args.platform, args.data, progress=progress)
    if out is not None:
        if out.suffix == ".csv":
            atomic_write_text(out, rows.to_csv(index=False), overwrite=True)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            rows.to_parquet(out, index=False)
    if args.json:
        print_json(metrics)
        return 0
    with pd.option_context("display.max_rows", 200, "display.max_columns", 40, "display.width", 200,
                           "display.float_format", "{:.4g}".format):
        for experiment, frame in rows.groupby("experiment", sort=False):
            print(f"== {experiment}")
            print(frame.dropna(axis=1, how="all").drop(columns="experiment").to_string(index=False))
            print()
    for name, m in metrics.items():
        print(f"== {name} error metrics")
        from xstage.cli import print_table
        print_table(m)
    if out is not None:
        print(f"wrote {out}")
    return 0
