"""``xstage results KIND``: summaries of the committed measurement records under data/."""

from pathlib import Path

from xstage.cli.common import add_json, print_json, print_table
from xstage.errors import InputError
from xstage.paths import data_dir

# (module, function): modules without GPU imports, so the summaries work on any machine
KINDS = {
    "calibration": ("xstage.compare.calibration_records", "summarize_results"),
    "attention": ("xstage.compare.attention_records", "summarize"),
    "moe": ("xstage.compare.moe_records", "summarize"),
}


def register(sub):
    p = sub.add_parser("results", help="summarize committed hardware records (calibration, attention, moe)",
                       description="Summarize the committed measurement records under data/.")
    p.add_argument("kind", choices=sorted(KINDS), help="which records")
    p.add_argument("--platform", default=None,
                   help="platform name: calibration records; moe and attention records: that platform's rows only "
                        "(moe default: h200-pcie-host where the records hold several)")
    p.add_argument("--data", default=None, help="records folder (default: the checkout's data/ or $XSTAGE_DATA)")
    add_json(p, "print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import importlib

    if args.data is not None and not args.data.strip():
        raise InputError("--data", args.data, "must name a records folder")
    folder = Path(args.data) if args.data is not None else data_dir()
    if not folder.is_dir():
        raise InputError("--data", str(folder), "is not a folder")
    module_name, function = KINDS[args.kind]
    summary = getattr(importlib.import_module(module_name), function)(folder, args.platform)
    if args.json:
        print_json(summary)
        return 0
    show = print_table
    if args.kind == "calibration":     # the held-out pairs that miss as a block, not a dict on one line
        from xstage.cli.calib import miss_lines

        def show(row):
            print_table({k: v for k, v in row.items() if k != "heldout_misses"})
            lines = miss_lines(row)
            if lines:
                print("\n".join(lines))
    for row in (summary if isinstance(summary, list) else [summary]):
        show(row)
        if isinstance(summary, list):
            print()
    return 0
