"""``xstage replay fa --stagger-span / --due-over``: the FA4 split kernels' send rules reach the predictor; without
them the output is today's (no new keys)."""

import json

import pytest


SPLIT = ["replay", "fa", "-M", "16384", "--heads", "3", "-p", "h200-pcie-host", "--fa-us", "575", "--send", "stagger",
         "--send-step-offset", "1", "--order", "local_last", "--tail-parts", "2", "--fa-tail-parts", "2",
         "--exit-waits-for-drain", "--sm-store-GBps", "52.8", "--shared-buffer-MiB", "0.01", "--json"]


def test_defaults_add_no_keys_and_flags_reach_the_kernel(cli):
    code, out, _ = cli(*SPLIT)
    base = json.loads(out)
    assert code == 0 and "stagger_span" not in base and "due_over" not in base
    code, out, _ = cli(*SPLIT, "--stagger-span", "2", "--due-over", "tile")
    assert code == 0 and json.loads(out) == base
    code, out, _ = cli(*SPLIT, "--stagger-span", "1", "--due-over", "window")
    d = json.loads(out)
    assert code == 0 and (d["stagger_span"], d["due_over"]) == (1, "window")
    assert d["fa_us"] == pytest.approx(base["fa_us"]) and d["remote_MiB"] == pytest.approx(base["remote_MiB"])


@pytest.mark.parametrize("flags, needle", [
    (["--due-over", "tiles"], "--due-over"),
    (["--stagger-span", "0"], "--stagger-span"),
    (["--stagger-span", "x"], "--stagger-span"),
])
def test_bad_flag_is_one_line_and_exit_2(cli, flags, needle):
    code, out, err = cli(*SPLIT, *flags)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_due_over_without_stagger_names_the_flag(cli):
    code, _, err = cli("replay", "fa", "-M", "8192", "--fa-us", "190", "--due-over", "unit")
    assert code == 2 and "--due-over" in err and "needs send=stagger" in err
