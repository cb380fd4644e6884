"""The third held-out MoE sweep (hw/moe/sweep_heldout3.py): new bf16 configurations, wired as --sweep heldout3."""

import argparse

import pytest

from xstage.cli import bench_moe as C
from xstage.errors import InputError
from xstage.hw.moe import bench
from xstage.hw.moe.sweep_heldout3 import HELDOUT3


def test_heldout3_holds_only_shapes_no_other_sweep_measured():
    earlier = [c for name, s in bench.SWEEPS.items() if name != "heldout3" for c in s]
    assert HELDOUT3 and not {(c[1], c[2]) for c in earlier} & {(c[1], c[2]) for c in HELDOUT3}
    assert {c[4] for c in HELDOUT3} == {"balanced", "skewed"} and {c[5] for c in HELDOUT3} == {"bf16"}
    for _m, h, i, _t, _r, _p, world, experts in HELDOUT3:
        assert h % 256 == 0 and i % 256 == 0 and world == 8 and experts >= 1
    assert any(c[2] <= bench.SHORT_K_MAX for c in HELDOUT3) and any(c[2] > bench.SHORT_K_MAX for c in HELDOUT3)
    assert bench.SWEEPS["heldout3"] is HELDOUT3


def test_the_cli_accepts_the_sweep_and_scopes_its_models(tmp_path):
    ap = argparse.ArgumentParser()
    C.add_flags(ap)
    assert C.check(ap.parse_args(["--out", str(tmp_path / "a"), "--sweep", "heldout3"])).sweep == "heldout3"
    with pytest.raises(InputError, match="--models"):
        C.check(ap.parse_args(["--out", str(tmp_path / "b"), "--sweep", "heldout3", "--models", "DiT-MoE-S"]))
