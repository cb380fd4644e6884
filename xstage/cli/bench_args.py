"""What the ``python -m xstage.hw.*`` GPU entry points share: one way to refuse bad input.

Every entry point (``bench_attention``, ``bench_attention_dist``, ``bench_fa4``, ``bench_moe``,
``bench_moe_dist``, ``bench_microbench``) parses its flags with ``BenchParser`` (usage errors become an
``InputError``), checks its values and its output folder before any GPU work (``out_folder``), and runs
under ``guard``: an ``InputError`` is one line ``<name>: error: <field>(=<value>) <what it must be>`` on
stderr and exit status 2, never a traceback. The one-GPU sweeps (``bench_attention``, ``bench_fa4``,
``bench_moe``) are one ``Entry`` each (their flags, checks and run); ``Entry.add_run`` makes the first and
the last also ``xstage attention run`` and ``xstage moe run``.
"""

import argparse
import re
import sys

from xstage.errors import InputError, require_int, require_positive
from xstage.paths import output_folder


class BenchParser(argparse.ArgumentParser):
    """argparse whose usage errors raise ``InputError`` naming the flag and the value given."""

    def error(self, message):
        m = re.match(r"argument ([^:]+): (.*)", message)
        field, must = (m.group(1).split("/")[0], m.group(2)) if m else ("arguments", message)
        value = re.search(r"(?:value|choice): '([^']*)'", must)
        raise InputError(field, value.group(1) if value else None, must)


class Entry:
    """One GPU entry point from its three parts: ``add_flags(parser)`` (declared once, shared with the
    ``xstage`` subcommand), ``check(args) -> args`` (every value and the output folder, before any GPU
    work; bad → ``InputError``) and ``execute(args) -> int`` (the run and its printed summary)."""

    def __init__(self, name: str, prog: str, doc: str, add_flags, check, execute, *, run_help: str = "",
                 run_description: str = ""):
        self.name, self.prog, self.description = name, prog, doc.splitlines()[0]
        self.add_flags, self.check, self.execute = add_flags, check, execute
        self.run_help, self.run_description = run_help, run_description  # as ``xstage ... run``

    def parser(self) -> BenchParser:
        p = BenchParser(prog=self.prog, description=self.description)
        self.add_flags(p)
        return p

    def parse_args(self, argv=None):
        """The checked flags; bad input → ``InputError``."""
        return self.check(self.parser().parse_args(argv))

    def main(self, argv=None) -> int:
        """Parse, check, run; bad input → one line on stderr, exit status 2."""
        return guard(self.name, lambda args: self.execute(self.parse_args(args)), argv)

    def add_run(self, actions) -> None:
        """This sweep as the ``run`` action of an ``xstage`` command (``xstage attention run``): the same
        flags, checked the same way, then torch and triton required, then the same run."""
        p = actions.add_parser("run", help=self.run_help, description=self.run_description)
        self.add_flags(p)
        p.set_defaults(func=self._run_checked)

    def _run_checked(self, args) -> int:
        from xstage.cli.exits import require_libraries

        self.check(args)
        require_libraries("torch", "triton")
        return self.execute(args)


def print_footer(records, checks: int, failed: list, wall_s: float) -> int:
    """A sweep's last lines: its records, how many checks ran and which failed, the wall time. Returns the
    exit status: 1 if a check failed, else 0."""
    print("records:", *map(str, records))
    print(f"checks: {checks} rows, {len(failed)} failed" + (f": {failed}" if failed else ""))
    print(f"wall: {wall_s:.0f}s")
    return 1 if failed else 0


def add_attention_flags(p, seq_lens: str) -> None:
    """--out, --seq-lens, --heads, --head-dim and --world-size of the one-GPU attention sweeps (Triton, FA4)."""
    p.add_argument("--out", required=True, help="output folder for the records")
    p.add_argument("--seq-lens", default=seq_lens)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--world-size", type=int, default=8)


def add_sweep_flags(ap: argparse.ArgumentParser, budget_s: float) -> None:
    """--trials, --budget-s and --max-configs of the MoE sweeps (checked by ``check_sweep_flags``)."""
    ap.add_argument("--trials", type=int, default=25, help="timed trials per variant")
    ap.add_argument("--budget-s", type=float, default=budget_s, help="start no configuration after this")
    ap.add_argument("--max-configs", type=int, default=None)


def check_sweep_flags(args) -> None:
    require_int("--trials", args.trials)
    require_positive("--budget-s", args.budget_s)
    if args.max_configs is not None:
        require_int("--max-configs", args.max_configs)


def guard(name: str, body, argv=None) -> int:
    """``body(argv)``'s exit status; an ``InputError`` becomes one line on stderr and status 2."""
    from xstage.cli.exits import show_hw_progress

    show_hw_progress()
    try:
        return int(body(argv) or 0)
    except InputError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return 2


out_folder = output_folder  # the one output-folder check (xstage.paths), shared with hw/calib
