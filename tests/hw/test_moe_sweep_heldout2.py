"""The second held-out MoE sweep (hw/moe/sweep_heldout2.py): new bf16 configurations, wired as --sweep heldout2."""

from xstage.hw.moe import bench
from xstage.hw.moe.sweep_heldout2 import HELDOUT2


def test_heldout2_holds_only_configurations_no_other_sweep_measured():
    key = lambda c: c[1:]  # noqa: E731 - everything but the model name
    seen = {key(c) for c in bench.SWEEP + bench.HELDOUT}
    assert HELDOUT2 and not seen & {key(c) for c in HELDOUT2}
    shapes = {(c[1], c[2]) for c in bench.SWEEP + bench.HELDOUT}
    assert not shapes & {(c[1], c[2]) for c in HELDOUT2}   # new (hidden, intermediate) pairs, not just new tokens
    assert {c[4] for c in HELDOUT2} == {"balanced", "skewed"} and {c[5] for c in HELDOUT2} == {"bf16"}


def test_heldout2_covers_both_kernel_classes_and_fits_their_tiles():
    short = [c for c in HELDOUT2 if c[2] <= bench.SHORT_K_MAX]
    assert short and len(short) < len(HELDOUT2)
    for _m, h, i, _t, _r, _p, world, experts in HELDOUT2:
        assert h % 256 == 0 and i % 128 == 0 and world == 8 and experts >= 1
    assert bench.SWEEPS["heldout2"] is HELDOUT2


def test_the_cli_accepts_the_sweep_and_scopes_its_models(tmp_path):
    import argparse

    import pytest

    from xstage.cli import bench_moe as C
    from xstage.errors import InputError

    ap = argparse.ArgumentParser()
    C.add_flags(ap)
    ok = C.check(ap.parse_args(["--out", str(tmp_path / "a"), "--sweep", "heldout2", "--models", "heldout2"]))
    assert ok.sweep == "heldout2"
    with pytest.raises(InputError, match="--models"):
        C.check(ap.parse_args(["--out", str(tmp_path / "b"), "--sweep", "heldout2", "--models", "DiT-MoE-S"]))
