"""``xstage replay fa --stall-backlog-MB``: the global-stall model (rule 14's link cost) from the command line; without
the flag the output is today's."""

import json

import pytest

from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel
from xstage.sim.predict_link import link_cost

BASE = ["replay", "fa", "-M", "16384", "--heads", "3", "-p", "h200-pcie-host", "--head-dim", "128", "--block-n", "128",
        "--fa-us", "1500", "--order", "local_last", "--tail-parts", "2", "--fa-tail-parts", "2", "--program-spread",
        "0.017", "--json"]


def test_stall_backlog_gives_the_link_cost(cli):
    code, out, _ = cli(*BASE, "--stall-backlog-MB", "0.35")
    d = json.loads(out)
    k = FaKernel(seq_len=16384, heads=3, head_dim=128, block_n=128, fa_us=1500.0, order="local_last", tail_parts=2,
                 fa_tail_parts=2)
    ref = link_cost(k, load_platform("h200-pcie-host"), 0.35e6, 0.017)
    assert code == 0 and d["model"] == "global_stall" and d["E_res_us"] == pytest.approx(ref["link_us"], abs=1e-6)
    assert d["fa_us"] == pytest.approx(1500.0) and d["stall_us"] == pytest.approx(ref["stall_us"], abs=1e-6)


def test_without_the_flag_the_replay_is_unchanged(cli):
    code, out, _ = cli(*BASE)
    d = json.loads(out)
    assert code == 0 and "model" not in d and "stall_us" not in d and "E_res_us" in d


@pytest.mark.parametrize("flags, needle", [
    (["--stall-backlog-MB", "-1"], "--stall-backlog-MB"),
    (["--stall-backlog-MB", "x"], "--stall-backlog-MB"),
    (["--stall-backlog-MB", "0.35", "--exit-waits-for-drain"], "--exit-waits-for-drain"),
    (["--stall-backlog-MB", "0.35", "--hold", "issue"], "--hold"),
    (["--stall-backlog-MB", "0.35", "--sm-pool-GBps", "5"], "--sm-pool-GBps"),
])
def test_bad_flag_is_one_line_and_exit_2(cli, flags, needle):
    code, out, err = cli(*BASE, *flags)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1
