"""What the ``python -m xstage.hw.*`` GPU entry points share: one way to refuse bad input.

Every entry point (``bench_attention``, ``bench_attention_dist``, ``bench_moe``, ``bench_moe_dist``,
``bench_microbench``) parses its flags with ``BenchParser`` (usage errors become an ``InputError``),
checks its values and its output folder before any GPU work (``out_folder``), and runs under ``guard``:
an ``InputError`` is one line ``<name>: error: <field>(=<value>) <what it must be>`` on stderr and exit
status 2, never a traceback.
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
