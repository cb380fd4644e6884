"""``xstage sim bursts --drain-order / --drain-spread``: the policy on the command line, one-line exit-2 errors."""

import json

import pytest

from xstage.cli import main

BASE = ["sim", "bursts", "--platform", "h200-pcie-host", "-K", "8", "-B", "32KiB", "-n", "40", "-G", "0", "--json"]


def test_ordered_shortens_the_median_burst_and_default_is_unchanged(cli):
    code, out, _ = cli(*BASE, "--skip", "0")
    fair = json.loads(out)
    assert code == 0 and "drain_order" not in fair
    code, out, _ = cli(*BASE, "--skip", "0", "--drain-order", "ordered", "--drain-spread", "1")
    d = json.loads(out)
    assert code == 0 and d["drain_order"] == "ordered" and d["drain_spread"] == 1.0 and d["engine"] == "simpy"
    assert d["T_iss_us"] < 0.9 * fair["T_iss_us"]                 # the favoured producers' bursts are short
    code, out, _ = cli(*BASE, "--skip", "0", "--drain-order", "ordered", "--drain-spread", "0")
    assert json.loads(out)["T_iss_us"] == pytest.approx(fair["T_iss_us"], rel=1e-9)


@pytest.mark.parametrize("extra, field", [
    (["--drain-order", "fifo"], "drain_order"),
    (["--drain-order", "ordered"], "drain_spread"),
    (["--drain-spread", "1"], "drain_spread"),
    (["--drain-order", "ordered", "--drain-spread", "-1"], "--drain-spread"),
    (["--drain-order", "ordered", "--drain-spread", "x"], "--drain-spread"),
    (["--drain-order", "ordered", "--drain-spread", "1", "--engine", "exact"], "engine"),
])
def test_bad_drain_flags_exit_2_with_one_line(cli, extra, field):
    code, out, err = cli(*BASE, *extra)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in err


def test_help_names_the_flags(capsys):
    try:
        code = main(["sim", "bursts", "--help"])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr().out
    assert code in (0, None)
    assert "--drain-order" in out and "--drain-spread" in out
