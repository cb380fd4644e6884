"""``two-stage-gated2`` (session 8, cal7): the lockstep issue law with the start skew overlapping the aggregate
ceiling (``Platform.skew_overlaps_ceiling``). Every existing platform and model answers as before."""

import json

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.paths import data_dir
from xstage.sim import fit as calib_fit
from xstage.sim.fit_two_stage import fit_issue_time0_overlap, overlap_t0
from xstage.sim.platform import Platform
from xstage.sim.platform_fit import MODELS, capacity_law_of, check_model


def _plat(**kw):
    base = dict(name="t", sm_count=132, drain_rate_GBps=50.0, t_fixed_us=0.05, producer_issue_GBps=62.0,
                capacity_points=((1, 1e6),), sm_outstanding_bytes=16384.0, start_skew_us=0.43,
                injection_GBps=3900.0)
    return Platform(**{**base, **kw})


def test_overlap_law_takes_the_larger_branch_not_the_sum():
    p = _plat(skew_overlaps_ceiling=True)
    S = 131 / 133
    per, agg = 14336 / 62e3 + 0.43 * S, 132 * 14336 / 3.9e6
    assert p.issue_time0_us(132, 14336) == pytest.approx(0.05 + max(per, agg))
    big = 132 * 65536 / 3.9e6                          # the ceiling binds: no skew added on top of it
    assert p.issue_time0_us(132, 65536) == pytest.approx(0.05 + big)
    assert _plat().issue_time0_us(132, 65536) == pytest.approx(0.05 + big + 0.43 * S)   # additive, as before
    assert p.issue_time0_us(1, 4096) == _plat().issue_time0_us(1, 4096)                 # K = 1: no skew either way


def test_field_round_trips_and_is_left_out_while_unset():
    p = _plat(skew_overlaps_ceiling=True)
    d = json.loads(p.to_json())
    assert d["skew_overlaps_ceiling"] is True and Platform.from_dict(d) == p
    assert "skew_overlaps_ceiling" not in json.loads(_plat().to_json())
    with pytest.raises(InputError, match="skew_overlaps_ceiling"):
        _plat(skew_overlaps_ceiling="yes")


def test_every_committed_platform_answers_the_additive_law():
    files = sorted(data_dir().rglob("platform*.json")) + sorted((data_dir().parent / "sim" / "platforms").glob("*.json"))
    files = [f for f in files if "skew_overlaps_ceiling" not in f.read_text()]
    assert len(files) > 10
    for f in files:
        try:
            p = Platform.load(f)
        except InputError:
            continue
        for k, b in ((4, 2048), (66, 14336), (132, 65536)):
            if k > p.sm_count or p.sm_store_GBps is not None:
                continue
            per = max(b - (p.store_buffer_bytes or 0.0), 0.0) / (p.producer_issue_GBps * 1e3)
            agg = 0.0 if p.injection_GBps is None else k * b / (p.injection_GBps * 1e3)
            want = p.t_fixed_us + max(per, agg) + (p.start_skew_us or 0.0) * (k - 1) / (k + 1)
            assert p.issue_time0_us(k, b) == pytest.approx(want, rel=1e-12), f


def test_models_are_only_extended():
    assert capacity_law_of("two-stage-gated2") == "relaxing-gated-overlap"
    assert {k: v for k, v in MODELS.items() if k not in ("two-stage-gated2", "two-stage-gated3", "two-stage-knee",
                                                         "two-stage-knee2", "two-stage-state", "two-stage-kneek",
                                                         "two-stage-gated2-span", "two-stage-gated2-cc",
                                                         "two-stage-gated2-span-cc", "two-stage-lockq")} == {
        "v1": "points", "two-stage": "shared+per_sm", "two-stage-relax": "relaxing",
        "two-stage-gated": "relaxing-gated", "two-stage-robust": "relaxing-robust"}
    with pytest.raises(InputError, match="model"):
        check_model("two-stage-gated9")


def test_overlap_fit_recovers_its_law_where_the_additive_one_cannot():
    rng = np.random.default_rng(0)
    K = rng.choice([4, 11, 26, 52, 88, 132], 80).astype(float)
    B = rng.choice([3, 6, 14, 22, 36, 56, 80, 144], 80).astype(float) * 1024
    T = overlap_t0(K, B, 0.04, 1 / 62e3, 1 / 3.9e6, 0.43)
    f = fit_issue_time0_overlap(K, B, T)
    assert f["skew_overlaps_ceiling"] is True
    assert f["start_skew_us"] == pytest.approx(0.43, rel=0.03)
    assert f["injection_GBps"] == pytest.approx(3900.0, rel=0.03)
    assert f["max_abs_rel_residual"] < 0.01
    add = calib_fit.fit_issue_time0(K, B, T, skew=True)
    assert add["max_abs_rel_residual"] > 5 * f["max_abs_rel_residual"]
