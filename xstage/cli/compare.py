"""``xstage compare RECORDS... [--platform ...] [--out FILE|DIR]``: measured records beside the simulator.

What is compared with what: ``xstage.compare.experiments``. Prints the table and the error metrics;
``--out FILE.csv`` / ``FILE.parquet`` writes the side-by-side rows in one file, ``--out DIR`` (no
suffix) writes them as records, one file per experiment (``bursts.parquet``, ``moe.parquet``, ...:
kind ``summary``, their metrics in the metadata) and ``metrics.json``. Every output is written to a
temporary path and renamed; an existing one is replaced only with ``--overwrite``.
"""

import contextlib
import io
import json
import os
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
    p.add_argument("--out", default=None, help="write the side-by-side rows to FILE.csv or FILE.parquet, or as "
                                               "records (one per experiment) into the folder DIR")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    from xstage.cli.common import add_json

    add_json(p, "print the error metrics as JSON")
    p.set_defaults(func=run)


def _check_out(text: str, overwrite: bool) -> Path:
    """``--out``: a .csv / .parquet file, or a folder (no suffix); refused before any work."""
    from xstage.cli.common import check_output

    out = Path(text)
    if out.suffix == "" and not text.endswith((".", "/")):
        check_output("--out", text, folder=True)
        if out.is_dir() and any(out.iterdir()) and not overwrite:
            raise InputError("--out", text, "already exists (pass --overwrite to replace it)")
        return out
    if out.suffix not in (".csv", ".parquet"):
        raise InputError("--out", text, "must end in .csv or .parquet, or name a folder (no suffix)")
    return check_output("--out", text, overwrite=overwrite, suffixes=(".csv", ".parquet"))


def _write(out: Path, parts: dict, metrics: dict, rows: pd.DataFrame, meta: dict) -> None:
    from xstage.records import json_safe as _clean
    from xstage.compare.experiments import METRICS
    from xstage.compare.store import write_folder
    from xstage.records import atomic_write_text, save_records

    if out.suffix == ".csv":
        atomic_write_text(out, rows.to_csv(index=False), overwrite=True)
    elif out.suffix == ".parquet":
        save_records(out, "summary", rows, {"compare": meta, "metrics": _clean(metrics)}, table="compare",
                     overwrite=True)
    else:
        def build(tmp: Path):
            for name, frame in parts.items():
                save_records(tmp / f"{name.replace(' ', '-')}.parquet", "summary", frame,
                             {"compare": {**meta, "experiment": name},
                              "metrics": _clean(metrics.get(METRICS.get(name, name), {}))}, table="compare")
            (tmp / "metrics.json").write_text(json.dumps(_clean(metrics), indent=2) + "\n")
        write_folder(out, build, overwrite=True)


def run(args) -> int:
    from tqdm import tqdm

    from xstage.cli import print_json, print_table
    from xstage.cli.common import progress_enabled
    from xstage.compare.experiments import compare_parts, load_arguments

    out = _check_out(args.out, args.overwrite) if args.out else None
    grouped = load_arguments([Path(p) for p in args.records])
    bars = progress_enabled(args)  # only on a terminal, never with --json
    progress = lambda items: tqdm(items, desc="simulate", unit="exp", file=sys.stderr,  # noqa: E731
                                  disable=not bars or len(items) < 4, dynamic_ncols=True)
    parts, metrics = compare_parts(grouped, args.platform, args.data, progress=progress)
    rows = pd.concat([r.assign(experiment=name) for name, r in parts.items()], ignore_index=True, sort=False)
    if out is not None:
        _write(out, parts, metrics, rows, {"records": list(args.records), "platform": args.platform,
                                           "data": args.data})
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        if args.json:
            print_json(metrics)
        else:
            with pd.option_context("display.max_rows", 200, "display.max_columns", 40, "display.width", 200,
                                   "display.float_format", "{:.4g}".format):
                for experiment, frame in rows.groupby("experiment", sort=False):
                    print(f"== {experiment}")
                    print(frame.dropna(axis=1, how="all").drop(columns="experiment").to_string(index=False))
                    print()
            for name, m in metrics.items():
                print(f"== {name} error metrics")
                print_table(m)
            if out is not None:
                print(f"wrote {out}")
    _emit(text.getvalue())
    return 0


def _emit(text: str) -> None:
    """Write ``text`` to stdout; a reader that stops early (``| head -2``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # nothing more reaches the pipe
