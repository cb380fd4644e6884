"""``two-stage-robust`` (session 7): the free-running issue law (``Platform.free_t_fixed_us``), the L1 choice of
rho, and the ``sweeps`` held-out split. Existing platforms and records keep their answers."""

import json

import numpy as np
import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.paths import data_dir
from xstage.records import load_records
from xstage.sim import fit as calib_fit
from xstage.sim.fit_robust import fit_free_t_fixed
from xstage.sim.platform import Platform, load_platform
from xstage.sim.platform_fit import capacity_law_of, split_pairs
from xstage.sim.split_sweeps import split_by_rule, split_pairs_sweeps

EXTRA = data_dir() / "calibration-extra"


def _two_stage(**kw):
    base = dict(name="t", sm_count=132, drain_rate_GBps=50.0, t_fixed_us=0.3, producer_issue_GBps=60.0,
                capacity_points=((1, 1e6),), sm_outstanding_bytes=16384.0, start_skew_us=0.4,
                store_buffer_bytes=2048.0, injection_GBps=4000.0)
    return Platform(**{**base, **kw})


def test_free_law_has_its_own_fixed_time_and_no_skew():
    p = _two_stage(free_t_fixed_us=0.12)
    assert p.free_issue_time0_us(33, 32768) == pytest.approx(0.12 + (32768 - 2048) / 60e3)
    assert p.free_issue_time0_us(4, 2048) == pytest.approx(0.12 + 4 * 2048 / 4e6)   # b0 covers B: the ceiling only
    assert p.issue_time0_us(33, 32768) == pytest.approx(0.3 + (32768 - 2048) / 60e3 + 0.4 * 32 / 34)
    assert p.free_issue_time0_us(132, 262144) == pytest.approx(0.12 + 132 * 262144 / 4e6)   # the ceiling I
    back = Platform.from_dict(json.loads(p.to_json()))
    assert back == p and back.free_t_fixed_us == pytest.approx(0.12)


def test_without_the_field_nothing_changes():
    p = _two_stage()
    assert p.free_running() is p and "free_t_fixed_us" not in p.to_dict()
    assert p.free_issue_time0_us(33, 8192) == p.issue_time0_us(33, 8192)
    for name in ("h200-pcie-host", "paper-b200"):
        bundled = load_platform(name)
        assert bundled.free_t_fixed_us is None and "free_t_fixed_us" not in bundled.to_dict()
    with pytest.raises(InputError, match="free_t_fixed_us"):
        _two_stage(free_t_fixed_us=-1.0)


def test_committed_gated_check_keeps_its_free_answers():
    """The committed two-stage-gated folder's check: the model check today gives the same free-running and lockstep
    predictions (the platform has no free_t_fixed_us)."""
    folder = EXTRA / "h200-local-wide-two-stage-gated"
    check, _ = load_records(folder / "check.parquet", "summary")
    rows = pd.concat([check[check["mode"] == "free"].head(12), check[check["mode"] == "periodic"].head(6)])
    now = calib_fit.model_check(rows, Platform.load(folder / "platform.json"))
    np.testing.assert_allclose(now["model_T_iss(us)"], rows["model_T_iss(us)"], rtol=1e-9)


def _free_points(t_free, platform):
    rows = []
    for k in (4, 33, 132):
        for b in (2048, 8192, 65536):
            t = t_free + platform.free_running().issue_time0_us(k, b) - platform.free_t_fixed_us if \
                platform.free_t_fixed_us is not None else None
            rows.append({"mode": "free", "producers": k, "bytes_per_producer": b, "T_iss(us)": t})
    return pd.DataFrame(rows)


def test_free_fixed_time_is_recovered_and_held_back_points_left_out():
    p = _two_stage(free_t_fixed_us=0.0, drain_rate_GBps=30000.0)
    pts = _free_points(0.15, p)
    fit = fit_free_t_fixed(pts, p)
    assert fit["t_free_us"] == pytest.approx(0.15) and fit["n_points"] == len(pts)
    slow = pd.DataFrame([{"mode": "free", "producers": 132, "bytes_per_producer": 262144, "T_iss(us)": 1.2}] * 20)
    fit2 = fit_free_t_fixed(pd.concat([pts, slow]), p)      # T ~ V/R: drain-bound, says nothing of the issue law
    assert fit2["n_points"] == len(pts) and fit2["t_free_us"] == pytest.approx(0.15)
    assert fit_free_t_fixed(pts.head(2), p) is None and fit_free_t_fixed(pts.assign(mode="periodic"), p) is None


def test_robust_model_name():
    assert capacity_law_of("two-stage-robust") == "relaxing-robust"


def test_sweeps_split_keeps_the_volume_extremes_of_the_gap_sweeps_fitted():
    points, _ = load_records(EXTRA / "h200-pcie-host-fresh" / "points.parquet", "point")
    for seed in range(4):
        split = split_pairs_sweeps(points, 0.3, seed)
        gap = points[points["phase"] == "gap"]
        by_pair = {(int(k), int(b)): s for k, b, s in zip(gap["producers"], gap["bytes_per_producer"], split[gap.index])}
        order = sorted(by_pair, key=lambda p: p[0] * p[1])
        assert by_pair[order[0]] == by_pair[order[-1]] == "fit"
        assert sum(v == "heldout" for v in by_pair.values()) == 2             # round(0.3 x 5)
        pairs = {}
        for k, b, s in zip(points["producers"], points["bytes_per_producer"], split):
            pairs.setdefault((k, b), set()).add(s)
        assert all(len(v) == 1 for v in pairs.values())                        # whole pairs
    assert (split_by_rule(points, "pairs") == split_pairs(points)).all()
    assert (split_by_rule(points, "sweeps", 0.3, 1) == split_pairs_sweeps(points, 0.3, 1)).all()
    with pytest.raises(InputError, match="split_rule"):
        split_by_rule(points, "random")


def test_fresh2_grid_has_no_pair_of_wide_or_fresh():
    from xstage.hw.calib.grids import GRIDS, grid_fields
    pairs = lambda g: ({(k, b) for k in g["producers"] for b in g["sizes"]} | set(g["gap_configs"])  # noqa: E731
                       | {(k, b) for k in g["iso_producers"] for b in g["iso_sizes"]})
    new = pairs(GRIDS["fresh2"])
    assert not new & pairs(GRIDS["wide"]) and not new & pairs(GRIDS["fresh"])
    assert set(grid_fields("fresh2", quick=True)["gap_configs"]) <= set(GRIDS["fresh2"]["gap_configs"])
