"""``xstage sim bursts --mode lockstep --barrier-us X``: the mode on the command line, one-line exit-2 errors."""

import json

import pytest

from xstage.cli import main

BASE = ["sim", "bursts", "--platform", "h200-pcie-host", "-K", "132", "-B", "32KiB", "-n", "16", "-G", "0", "--json"]


def test_lockstep_overlaps_the_barrier_with_the_drain(cli):
    code, out, _ = cli(*BASE, "--mode", "lockstep", "--barrier-us", "1.2", "--skip", "8")
    lock = json.loads(out)
    code_i, out_i, _ = cli(*BASE, "--mode", "isolated", "-G", "1.2", "--skip", "8")
    iso = json.loads(out_i)
    assert code == 0 and code_i == 0 and lock["mode"] == "lockstep" and lock["barrier_us"] == 1.2
    assert "barrier_us" not in iso and lock["skip"] == 8
    assert lock["period_us"] == pytest.approx(iso["period_us"] - 1.2, rel=1e-9)   # drain-bound: V / R
    assert lock["drained_us"] < iso["drained_us"]


@pytest.mark.parametrize("extra, field", [
    (["--mode", "lockstep"], "barrier_us"),
    (["--mode", "isolated", "--barrier-us", "1"], "barrier_us"),
    (["--mode", "lockstep", "--barrier-us", "-1"], "--barrier-us"),
    (["--mode", "lockstep", "--barrier-us", "x"], "--barrier-us"),
    (["--mode", "lockstep", "--barrier-us", "inf"], "--barrier-us"),
    (["--mode", "lockstp", "--barrier-us", "1"], "mode"),
])
def test_bad_lockstep_flags_exit_2_with_one_line(cli, extra, field):
    code, out, err = cli(*BASE, *extra)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in err


def test_help_names_the_mode_and_the_flag(capsys):
    try:
        code = main(["sim", "bursts", "--help"])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr().out
    assert code == 0 and "--barrier-us" in out and "lockstep" in out
