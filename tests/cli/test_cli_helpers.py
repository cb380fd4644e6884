"""The shared CLI pieces: ``add_command`` (a command described by its function's docstring), ``add_actions``,
``bench_args.Entry`` (one GPU entry point from flags, checks and run; the same sweep as ``xstage ... run``)
and ``print_footer``."""

import pytest

from xstage.cli.bench_args import Entry, print_footer
from xstage.cli.common import Parser, add_actions, add_command
from xstage.errors import InputError, require_int


def _run(args) -> int:
    """Do the thing
    described here, over two lines."""
    return 7


def test_add_command_describes_the_command_by_its_function(capsys):
    parser = Parser(prog="xstage")
    p = add_command(parser.add_subparsers(dest="command"), "thing", _run, "one line")
    assert p.description == "Do the thing\ndescribed here, over two lines."
    args = parser.parse_args(["thing"])
    assert args.func is _run and args.func(args) == 7
    p.print_help()
    assert "Do the thing described here, over two lines." in capsys.readouterr().out


def test_a_command_of_actions_alone_prints_its_help_and_exits_2(capsys):
    parser = Parser(prog="xstage")
    actions = add_actions(parser.add_subparsers(dest="command"), "group", "a group", "What the group does.", "act")
    add_command(actions, "one", _run, "the one action")
    args = parser.parse_args(["group"])
    assert args.func(args) == 2 and "What the group does." in capsys.readouterr().out
    assert parser.parse_args(["group", "one"]).func is _run


def _entry(calls):
    def add_flags(p):
        p.add_argument("--out", required=True)
        p.add_argument("--trials", default="3")

    def check(args):
        calls.append("check")
        args.trials = require_int("--trials", args.trials)
        return args

    def execute(args):
        calls.append("execute")
        return 0 if args.trials < 10 else 1

    return Entry("toy_bench", "python -m toy", "The toy sweep.\n\nMore.", add_flags, check, execute,
                 run_help="the toy sweep", run_description="Runs the toy sweep.")


def test_entry_checks_before_running_and_refuses_bad_input_in_one_line(capsys):
    calls = []
    e = _entry(calls)
    assert e.parser().description == "The toy sweep."
    assert e.parse_args(["--out", "x"]).trials == 3 and calls == ["check"]
    assert e.main(["--out", "x", "--trials", "20"]) == 1 and calls[-2:] == ["check", "execute"]
    calls.clear()
    assert e.main(["--out", "x", "--trials", "zero"]) == 2 and calls == ["check"]
    assert capsys.readouterr().err == "toy_bench: error: --trials(='zero') must be an integer\n"
    with pytest.raises(InputError):  # a usage error, too, names the flag
        e.parse_args([])


def test_entry_as_a_run_action_checks_first():
    calls = []
    parser = Parser(prog="xstage")
    actions = add_actions(parser.add_subparsers(dest="command"), "toy", "toy", "Toy.", "act")
    _entry(calls).add_run(actions)
    args = parser.parse_args(["toy", "run", "--out", "x", "--trials", "zero"])
    with pytest.raises(InputError):
        args.func(args)
    assert calls == ["check"]   # refused before the GPU libraries are asked for and before the run
    assert actions.choices["run"].description == "Runs the toy sweep."


def test_print_footer_lists_failures_and_sets_the_exit_status(capsys):
    assert print_footer(["a.parquet", "b.json"], 3, [], 12.4) == 0
    assert capsys.readouterr().out == "records: a.parquet b.json\nchecks: 3 rows, 0 failed\nwall: 12s\n"
    assert print_footer(["(none)"], 2, ["fused"], 1.0) == 1
    assert "checks: 2 rows, 1 failed: ['fused']" in capsys.readouterr().out
