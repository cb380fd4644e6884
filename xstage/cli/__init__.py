"""The ``xstage`` command line.

Every subcommand turns bad input into one line on stderr and exit status 2 (see
``xstage.errors.InputError``). Subpackages register their own subcommands: each module named in
``_PLUGINS`` has ``register(subparsers)`` that adds parsers whose ``func(args) -> int`` runs them.
"""

import argparse
import importlib
import json
import math
import sys

from xstage.errors import InputError

_PLUGINS = (
    "xstage.cli.core",
    "xstage.demo",
    "xstage.cli.sched",
    "xstage.cli.calib",
    "xstage.cli.attention",
    "xstage.cli.moe",
    "xstage.cli.results",
    "xstage.cli.compare",
    "xstage.cli.dash",
    "xstage.cli.trace",
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit status 2."""

    def error(self, message):
        self.exit(2, f"xstage: error: {message}\n")


def _clean(obj):
    """JSON-safe: NaN/inf to None, numpy scalars to Python."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def print_json(obj) -> None:
    print(json.dumps(_clean(obj), indent=2, sort_keys=False))


def print_table(rows: dict) -> None:
    """Print a flat dict as aligned ``key  value`` lines."""
    width = max((len(k) for k in rows), default=0)
    for key, value in rows.items():
        if isinstance(value, float):
            value = f"{value:.6g}"
        print(f"{key:<{width}}  {value}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="xstage", description="Model, simulate and measure the X-Stage "
                     "(post-issue remote-store progress) of fused GPU kernels.")
    from xstage import __version__
    parser.add_argument("--version", action="version", version=f"xstage {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _PLUGINS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name == name:  # plugin not written yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except InputError as err:
        print(f"xstage: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("xstage: interrupted", file=sys.stderr)
        return 130

