"""``xstage dashboard`` and ``xstage report``: the pages and their tables.

The frames behind the pages are computed once (``xstage.compare.collect``: the simulation and the
comparisons) and saved as records in ``OUT/frames/``; the pages are drawn from what was saved. A
rebuild into the same folder (``--overwrite``) reuses those frames while the records folder, the
platforms, ``--quick`` and the code are unchanged; ``--frames DIR`` draws from a saved frames folder
and simulates nothing.
"""

import sys
from pathlib import Path

from xstage.cli.common import add_command
from xstage.errors import InputError


def _common(p, what: str):
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--data", default=None, help="records folder (default: the checkout's data/ or $XSTAGE_DATA)")
    p.add_argument("--platform", action="append", default=None, dest="platforms",
                   help="platform name or .json file (repeatable; default: bundled and calibrated platforms)")
    p.add_argument("--quick", action="store_true", help="small simulated grids (a fast preview)")
    p.add_argument("--frames", default=None, metavar="DIR",
                   help="draw from the frames saved in DIR (a dashboard folder's frames/): no simulation")
    p.add_argument("--overwrite", action="store_true", help=f"replace {what} if it exists")


def register(sub):
    p = add_command(sub, "dashboard", run_dashboard, "build the interactive plotly pages (offline HTML)")
    _common(p, "the output folder (all of it: stale pages go)")
    r = add_command(sub, "report", run_report, "write a markdown report with the tables behind every page")
    _common(r, "OUT/report.md")


def _say(msg: str) -> None:
    print(f"xstage: {msg} ...", file=sys.stderr, flush=True)


def _frames(args, saved: Path | None = None) -> tuple[dict, str]:
    """(collected frames, their input fingerprint): from ``--frames``, else ``saved`` when its fingerprint
    matches the inputs, else computed now."""
    from xstage.compare import collect as collect_module
    from xstage.compare.store import input_key, load_frames, read_manifest

    if args.frames is not None:
        folder = Path(args.frames)
        if not folder.is_dir():
            raise InputError("--frames", str(folder), "is not a folder")
        manifest = read_manifest(folder)
        if manifest is None:
            raise InputError("--frames", str(folder), "holds no manifest.json (a dashboard folder's frames/)")
        return load_frames(folder), manifest.get("inputs", "")
    data = Path(args.data) if args.data else None
    if data is not None and not data.is_dir():
        raise InputError("--data", str(data), "is not a folder")
    from xstage.paths import data_dir as default_data_dir

    key = input_key(data or default_data_dir(), args.platforms, args.quick)
    if saved is not None:
        try:
            manifest = read_manifest(saved)
        except InputError:
            manifest = None
        if manifest is not None and manifest.get("inputs") == key:
            _say(f"frames are current, drawing them: {saved}")
            return load_frames(saved), key
    return collect_module.collect(data, args.platforms, quick=args.quick, progress=_say), key


def _check_out(out: Path, *, folder_must_be_new: bool, overwrite: bool, path: Path) -> None:
    """Refuse before any long work: ``--out`` a file, the output exists without ``--overwrite``, or ``--out``
    cannot be created or written."""
    from xstage.paths import writable_folder

    if out.exists() and not out.is_dir():
        raise InputError("--out", str(out), "exists and is not a folder")
    taken = (out.is_dir() and any(out.iterdir())) if folder_must_be_new else path.exists()
    if taken and not overwrite:
        raise InputError("--out", str(path), "already exists (pass --overwrite to replace it)")
    writable_folder("--out", out, out)


def run_dashboard(args) -> int:
    """Build the dashboard pages (calibration, what-if, timeline, spans, MoE, attention, simulated vs measured)
    into a folder and print the index page's path. The frames behind them are saved in OUT/frames/ (records); a
    rebuild reuses them while the records and the code are unchanged."""
    from xstage.dashboards.build import FRAMES, build_dashboards

    out = Path(args.out)
    _check_out(out, folder_must_be_new=True, overwrite=args.overwrite, path=out)
    collected, key = _frames(args, saved=out / FRAMES if (out / FRAMES).is_dir() else None)
    index = build_dashboards(out, collected, inputs=key, overwrite=args.overwrite)
    _print(index)
    return 0


def run_report(args) -> int:
    """Write DIR/report.md: the tables behind every dashboard page, for readers without a browser."""
    from xstage.dashboards.report import write_report

    out = Path(args.out)
    _check_out(out, folder_must_be_new=False, overwrite=args.overwrite, path=out / "report.md")
    collected, _key = _frames(args)
    _print(write_report(out, collected, overwrite=args.overwrite))
    return 0


def _print(line) -> None:
    """Print the one line these commands answer; a closed pipe (``| head -0``) is not an error."""
    import os

    try:
        print(line, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
