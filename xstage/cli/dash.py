"""``xstage dashboard`` and ``xstage report``: the pages and their tables."""

import sys
from pathlib import Path

from xstage.errors import InputError


def _common(p):
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--data", default=None, help="records folder (default: the checkout's data/ or $XSTAGE_DATA)")
    p.add_argument("--platform", action="append", default=None, dest="platforms",
                   help="platform name or .json file (repeatable; default: bundled and calibrated platforms)")
    p.add_argument("--quick", action="store_true", help="small simulated grids (a fast preview)")


def register(sub):
    p = sub.add_parser("dashboard", help="build the interactive plotly pages (offline HTML)",
                       description="Build the dashboard pages (calibration, what-if, timeline, spans, MoE, "
                                   "attention, simulated vs measured) into a folder and print the index page's path.")
    _common(p)
    p.set_defaults(func=run_dashboard)
    r = sub.add_parser("report", help="write a markdown report with the tables behind every page",
                       description="Write DIR/report.md: the tables behind every dashboard page, for readers "
                                   "without a browser.")
    _common(r)
    r.set_defaults(func=run_report)


def _collect(args):
    from xstage.compare.collect import collect

    data = Path(args.data) if args.data else None
    if data is not None and not data.is_dir():
        raise InputError("--data", str(data), "is not a folder")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError("--out", str(out), "exists and is not a folder")
    say = lambda msg: print(f"xstage: {msg} ...", file=sys.stderr, flush=True)  # noqa: E731
    return collect(data, args.platforms, quick=args.quick, progress=say)


def run_dashboard(args) -> int:
    from xstage.dashboards.build import build_dashboards

    collected = _collect(args)
    index = build_dashboards(Path(args.out), collected=collected)
    print(index)
    return 0


def run_report(args) -> int:
    from xstage.dashboards.report import write_report

    path = write_report(Path(args.out), _collect(args))
    print(path)
    return 0
