"""The ``xstage`` command line.

Every subcommand turns bad input into one line on stderr and exit status 2 (``xstage.cli.exits``).
Each module named in ``_PLUGINS`` has ``register(subparsers)`` that adds parsers whose
``func(args) -> int`` runs them; shared flags and printing live in ``xstage.cli.common``.
"""

import importlib

from xstage.cli.common import Parser as _Parser
from xstage.cli.common import clean, print_json, print_table  # noqa: F401 - the public printing helpers
from xstage.cli.exits import call, show_hw_progress

_PLUGINS = (
    "xstage.cli.core",
    "xstage.cli.demo",
    "xstage.cli.sched",
    "xstage.cli.calib",
    "xstage.cli.attention",
    "xstage.cli.moe",
    "xstage.cli.results",
    "xstage.cli.compare",
    "xstage.cli.dash",
    "xstage.cli.trace",
)


def build_parser() -> _Parser:
    parser = _Parser(prog="xstage", description="Model, simulate and measure the X-Stage "
                     "(post-issue remote-store progress) of fused GPU kernels.")
    from xstage import __version__
    parser.add_argument("--version", action="version", version=f"xstage {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in _PLUGINS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv=None) -> int:
    def run() -> int:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        show_hw_progress(quiet=bool(getattr(args, "quiet", False)))
        return args.func(args)

    return call(run, "xstage")
