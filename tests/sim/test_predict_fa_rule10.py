"""The tenth FA rule (``benchmarks/predict_fa_rule10.py``): the split kernel's fitted drift read at the nearest
K/V-bytes-per-head point, a tail-0 build offset; and its committed pre-registration and judged run."""

import json

import pytest

from xstage.paths import data_dir
from xstage.sim.platform import load_platform

from .bench_scripts import load_script

PRE = "predictions/fa-rule10-preregistered-h200-pcie-host.json"
JUDGED = "predictions/fa-rule10-heldout3-63fb3ec-h200-pcie-host.json"


@pytest.fixture(scope="module")
def mod():
    return load_script("predict_fa_rule10")


@pytest.fixture(scope="module")
def setup(mod):
    base = data_dir()
    factors = json.loads((base / mod.PP.LAWS).read_text())["mainloop_factors"]
    return base, factors, mod.R8.measure(base), load_platform("h200-pcie-host")


def _row(mod, setup, variant, M):
    base, factors = setup[:2]
    return next(r for r in mod.R8.preregistered([M], base, factors) if r["variant"] == variant)


M10 = {"split_drift_per_kv_bytes": {53248 * 512: 0.026, 57344 * 512: 0.072}, "no_tail_offset_ratio": -0.01,
       "programs": 132}


def test_the_split_drift_steps_at_the_nearest_kv_point(mod, setup):
    m8, platform = setup[2], setup[3]
    for M, want in ((53248, 0.026), (55296, 0.026), (56320 + 1024, 0.072), (61440, 0.072)):
        e, drift = mod.rule10(_row(mod, setup, mod.R9.SPLIT, M), platform, 2.6 * 2**20, m8, M10)
        assert drift == want
    hi = mod.rule10(_row(mod, setup, mod.R9.SPLIT, 59392), platform, 2.6 * 2**20, m8, M10)[0]
    lo = mod.rule10(_row(mod, setup, mod.R9.SPLIT, 59392), platform, 2.6 * 2**20, m8, dict(
        M10, split_drift_per_kv_bytes={1: 0.017}))[0]
    assert hi < lo                                                       # more drift, more hidden


def test_without_a_tail_every_variant_moves_by_the_build_offset(mod, setup):
    m8, platform = setup[2], setup[3]
    for v in mod.R8.VARIANTS:
        r = _row(mod, setup, v, 56320)                                    # 1320 tiles: 10 waves of 132
        e, _ = mod.rule10(r, platform, 2.6 * 2**20, m8, M10)
        e0, _ = mod.rule10(r, platform, 2.6 * 2**20, m8, dict(M10, no_tail_offset_ratio=0.0))
        assert e == pytest.approx(e0 - 0.01 * r["kw"]["fa_us"])
    r = _row(mod, setup, mod.R9.SPLIT, 55296)                             # a tail: no offset
    assert mod.rule10(r, platform, 2.6 * 2**20, m8, M10)[0] == mod.rule10(
        r, platform, 2.6 * 2**20, m8, dict(M10, no_tail_offset_ratio=0.0))[0]


def test_the_judged_run_kept_the_preregistered_answers():
    pre = json.loads((data_dir() / PRE).read_text())
    judged = json.loads((data_dir() / JUDGED).read_text())
    assert pre["mode"] == "preregistered" and pre["rules_commit"].startswith("f95993c")
    answers = {(r["M"], r["variant"]): r["rule10_E_res_us"] for r in pre["rows"]}
    assert {M for M, _ in answers} == {47104, 51200, 55296, 56320, 59392}
    rows = [r for r in judged["rows"] if (r["M"], r["variant"]) in answers]
    assert len(rows) == 20 and all(r["prereg_rule10_E_res_us"] == answers[(r["M"], r["variant"])] for r in rows)
    assert judged["summary"]["pre-registered rows"]["prereg_rule10"]["n"] == 20
    assert judged["summary"]["all"]["rule10"]["n"] == 32                  # the 6-head rows judged too
