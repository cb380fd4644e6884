"""The ninth FA rule (``benchmarks/predict_fa_rule9.py``): the split tile-end kernel's drift fitted per M on the
committed residuals, every other answer the eighth rule's where there is a tail, the non-split twin where there is none."""

import pytest

from xstage.paths import data_dir
from xstage.sim.platform import load_platform

from .bench_scripts import load_script


@pytest.fixture(scope="module")
def mod():
    return load_script("predict_fa_rule9")


@pytest.fixture(scope="module")
def setup(mod):
    import json

    base = data_dir()
    factors = json.loads((base / mod.PP.LAWS).read_text())["mainloop_factors"]
    m8 = mod.R8.measure(base)
    return base, factors, m8


def _row(mod, setup, variant, M):
    base, factors, _ = setup
    return next(r for r in mod.R8.preregistered([M], base, factors) if r["variant"] == variant)


def test_no_tail_is_read_from_the_tile_count(mod):
    kw = {"heads": 3, "block_m": 128}
    assert mod.no_tail(dict(kw, seq_len=45056), 132)          # 1056 tiles = 8 waves of 132
    assert not mod.no_tail(dict(kw, seq_len=49152), 132)      # 1152 tiles: a tail of 96
    assert mod.no_tail(dict(kw, seq_len=49152), 96)


def test_with_a_tail_only_the_split_kernel_changes(mod, setup):
    m8 = setup[2]
    for v in mod.R8.VARIANTS:
        r = _row(mod, setup, v, 53248)
        kw9, kw8 = mod.rule9_kw(r, m8, 0.05, 132), mod.R8.rule8_kw(r, m8)
        if v == mod.SPLIT:
            assert kw9 == dict(kw8, program_spread=0.05)
        else:
            assert kw9 == kw8


def test_without_a_tail_the_split_variants_are_their_twins_with_no_mainloop_factor(mod, setup):
    m8 = setup[2]
    kws = {v: mod.rule9_kw(_row(mod, setup, v, 45056), m8, 0.05, 132) for v in mod.R8.VARIANTS}
    for split, twin in mod.TWIN.items():
        a, b = dict(kws[split]), dict(kws[twin])
        assert a.pop("tail_parts") == 2 and b.pop("tail_parts") == 1    # no tail: the parts never run
        assert a == b and a["mainloop_factor"] == 1.0
    r8 = mod.R8.rule8_kw(_row(mod, setup, "fused_wb", 45056), m8)
    assert r8["mainloop_factor"] > 1.0 and kws["fused_wb"]["mainloop_factor"] == 1.0


def test_the_split_kernels_answer_falls_with_its_drift(mod, setup):
    m8 = setup[2]
    r = _row(mod, setup, mod.SPLIT, 36864)
    platform = load_platform("h200-pcie-host")
    lo, hi = (mod.split_residual(r, m8, platform, 0.35e6, d) for d in (0.0, 0.06))
    assert lo > 2 * hi > 0
