"""knee20 (issue 15, session 15): the candidates on top of ``two-stage-lockq`` (``benchmarks/calib_knee20.py``): the
affine issue law recovers a known law and trims a caught point, the knee margin sits midway between the free and
caught plateau pairs, each candidate reduces to lockq where its change is off, the scorer is the existing judge,
and the decision rule."""
from pathlib import Path

import json

import numpy as np
import pandas as pd
import pytest

from xstage.sim.fit import start_range
from xstage.sim.platform import Platform

from .bench_scripts import load_script

k20 = load_script("calib_knee20")
EXTRA = Path(__file__).resolve().parents[2] / "data" / "calibration-extra"
KiB = 1024


def _platform(**kw):
    base = dict(name="t", sm_count=132, drain_rate_GBps=50.0, t_fixed_us=0.3, producer_issue_GBps=50.0,
                capacity_points=((1, 1e6),), sm_outstanding_bytes=1e4, capacity_relax_GBps=10.0)
    return Platform(**{**base, **kw})


def _law_points():
    K = np.repeat([17.0, 42.0, 68.0, 100.0, 126.0], 6)
    B = np.tile([6.0, 14.0, 20.0, 24.0, 32.0, 44.0], 5) * KiB
    return K, B, 0.33 + B / 55e3 + 0.08 * start_range(K)   # t_fixed 0.33 us, P 55 GB/s, s 0.08 us


def test_affine_law_recovers_a_known_law_and_trims_a_caught_point():
    K, B, T = _law_points()
    law = k20.fit_affine_issue_law(np.r_[K, 17.0], np.r_[B, 160.0 * KiB], np.r_[T, 38.27])
    assert law["t_fixed_us"] == pytest.approx(0.33, rel=1e-9)
    assert law["producer_issue_GBps"] == pytest.approx(55.0, rel=1e-9)
    assert law["start_skew_us"] == pytest.approx(0.08, rel=1e-9)
    assert law["n_points"] == len(T) and law["trimmed"] == [[17, 160, 38.27]]


def test_affine_law_pins_a_negative_coefficient_at_zero():
    K, B, T = _law_points()
    law = k20.fit_affine_issue_law(K, B, T - 0.2 * start_range(K))   # skew -0.12 us: pinned at 0, the rest refitted
    assert law["start_skew_us"] == 0.0 and law["t_fixed_us"] > 0 and law["producer_issue_GBps"] > 0
    with pytest.raises(ValueError, match="needs >= 3 untrimmed points, got 2"):
        k20.fit_affine_issue_law(K[:2], B[:2], T[:2])


def test_with_issue_law_is_the_affine_T_iss0():
    plat = k20.with_issue_law(_platform(store_buffer_bytes=8 * KiB, injection_GBps=900.0, sm_store_GBps=70.0),
                              {"t_fixed_us": 0.33, "producer_issue_GBps": 55.0, "start_skew_us": 0.08})
    for k, b in ((17, 6 * KiB), (126, 52 * KiB)):
        assert plat.issue_time0_us(k, b) == pytest.approx(0.33 + b / 55e3 + 0.08 * (k - 1) / (k + 1), rel=1e-12)


def _plateau(ratios_caught, plat):
    """A fit half of lockstep plateau pairs at K = 50 with knee ratio r (under ``plat``), measured at T_iss0 (free)
    or 3 T_iss0 (caught)."""
    rows, k = [], 50
    for r, caught in ratios_caught:   # solve K B - R t0(B) = r Q(K) for B (t0 affine in B with P, t_fixed)
        P, R, Q = plat.producer_issue_GBps * 1e3, plat.drain_rate_Bpus, plat.capacity_bytes(k)
        b = (r * Q + R * plat.t_fixed_us) / (k - R / P)
        t0 = plat.issue_time0_us(k, b)
        rows.append({"phase": "plateau", "mode": "periodic", "producers": k, "bytes_per_producer": b,
                     "T_iss(us)": 3 * t0 if caught else t0, "gap_measured(us)": 100.0})
    return pd.DataFrame(rows)


def test_knee_margin_sits_midway_between_free_and_caught_pairs():
    plat = _platform(store_buffer_bytes=0.0)
    pts = _plateau([(0.8, False), (0.95, False), (1.1, True), (1.3, True), (1.4, False)], plat)
    m = k20.knee_margin(pts, plat)
    assert m["r_free"] == pytest.approx(0.95) and m["r_caught"] == pytest.approx(1.1)
    assert m["factor"] == pytest.approx(np.sqrt(0.95 * 1.1))
    assert k20.knee_margin(pts[~pts.index.isin([2, 3])], plat)["factor"] == 1.0   # nothing caught: the line stays


def test_margin_reduces_to_lockq_when_nothing_on_the_fit_half_is_caught():
    plat = _platform(store_buffer_bytes=0.0)
    half = _plateau([(0.8, False), (0.95, False)], plat)
    out, info = k20.candidate("margin", half, plat, {})
    assert out is plat and info["margin"]["factor"] == 1.0


def _row(c, g, rule, s, met, p90):
    return {"candidate": c, "grid": g, "rule": rule, "seed": s, "all_four": met, "heldout_p90_rel_err_T_iss": p90}


def test_decide_needs_four_seeds_on_every_deciding_grid_and_the_guard():
    rows = []
    for c in k20.CANDIDATES:
        for g in k20.DECIDING + ("fresh10",):
            rows += [_row(c, g, "bracket", s, c != "lockq" and (c != "margin" or s) and g != "fresh10", 0.10)
                     for s in k20.SEEDS]
        for g in k20.RECORDED_GRIDS:
            rows.append(_row(c, g, "recorded", 0, False, {"lockq": 0.20, "affine": 0.26}.get(c, 0.25)))
    d = k20.decide(rows)
    assert d["per_candidate"]["affine"]["seeds_met"] == {"fresh11": 5, "fresh12": 5, "fresh12-r2": 5}
    assert not d["per_candidate"]["affine"]["ready"]            # fresh2 / fresh5 p90 0.26 > 0.20 + 0.05
    assert d["per_candidate"]["margin"]["ready"]                # 4 of 5 seeds and 0.25 <= 0.25
    assert d["frozen"] == "margin" and d["lockq_seeds_met"] == {g: 0 for g in k20.DECIDING}


@pytest.fixture(scope="module")
def fresh11_seed0():
    pts = k20.grid_points("host", "fresh11")
    split = k20.split_of(pts, "bracket", 0)
    half = pts[split.to_numpy() == "fit"]
    lockq, fit = k20.fit_model(half, k20.MODEL, "knee20-test")
    return pts, split, half, lockq, fit


def test_scorer_is_the_committed_judge_on_unmodified_lockq(fresh11_seed0):
    pts, split, half, lockq, fit = fresh11_seed0
    row = next(r for r in json.loads((EXTRA / "knee19-posthoc.json").read_text())["rows"]
               if r["grid"] == "fresh11" and r["seed"] == 0 and r["rule"] == "lockq")
    j = k20.judge(*k20.candidate("lockq", half, lockq, fit)[:1], pts, split)
    for k in k20.FIGS:
        assert j[f"heldout_{k}"] == pytest.approx(row[f"heldout_{k}"], abs=1e-12)


def test_affine_path_on_lockqs_own_law_gives_lockqs_line(fresh11_seed0):
    _, _, half, lockq, fit = fresh11_seed0
    two = fit["Q_two_stage"]
    stage = k20.with_line(lockq, two["Q_shared_bytes"], two["q_sm_bytes"], 1.0)   # the issue law unchanged
    lq = k20.fit_lockstep_capacity(half, stage)
    assert lq["Q_shared_bytes"] == pytest.approx(lockq.shared_capacity_bytes(1), rel=1e-12)
    assert lq["q_sm_bytes"] == pytest.approx(lockq.sm_outstanding_bytes, rel=1e-12)
    assert lq["rho_Bpus"] / 1e3 == pytest.approx(lockq.capacity_relax_GBps, rel=1e-12)
    # and lockq_loss is fit_lockstep_capacity's own loss at its optimum
    assert k20.lockq_loss(half, lockq, lq["rho_Bpus"]) == pytest.approx(fit["lockstep_capacity"]["loss"], rel=1e-9)
