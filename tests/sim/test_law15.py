"""law15 (issue 15, session 13): the lockstep issue law with no aggregate ceiling where the span law holds
(``fit_issue_time0_overlap(ceiling_free_below=)``, ``--model two-stage-gated2-span``)."""
import numpy as np
import pytest

from xstage.paths import data_dir
from xstage.records import load_records
from xstage.sim.fit_two_stage import fit_issue_time0_overlap, overlap_t0, span_corners
from xstage.sim.platform_fit import MODELS, SPAN_LAW_MAX_BYTES, capacity_law_of, check_model, fit_platform
from xstage.sim.split_sweeps import split_by_rule

KiB = 1024
FRESH10 = data_dir() / "calibration-extra" / "h200-pcie-host-fresh10"


def _binds_below(fit, K, limit):
    """Whether ``fit``'s ceiling binds anywhere on a dense (K, B <= limit) grid over K's range."""
    if fit["injection_GBps"] is None:
        return False
    ks = np.linspace(min(K), max(K), 60)[:, None]
    bs = np.linspace(1.0, limit, 60)[None, :]
    own = (np.maximum(bs - (fit["store_buffer_bytes"] or 0.0), 0.0) / (fit["producer_issue_GBps"] * 1e3)
           + fit["start_skew_us"] * (ks - 1) / (ks + 1))
    return bool(np.any(ks * bs / (fit["injection_GBps"] * 1e3) > own * (1 + 1e-9)))


def test_model_name_and_law():
    assert check_model("two-stage-gated2-span") == "two-stage-gated2-span"
    assert capacity_law_of("two-stage-gated2-span") == "relaxing-gated-overlap-span"
    assert MODELS["two-stage-gated2"] == "relaxing-gated-overlap" and MODELS["v1"] == "points"
    assert SPAN_LAW_MAX_BYTES == 24 * KiB


def test_span_corners_exact():
    K, B = [9, 34, 116], [6 * KiB, 16 * KiB]
    ks, bs = span_corners(K, B, 9 * KiB, 24 * KiB)
    assert list(zip(ks, bs)) == [(9, 9 * KiB), (9, 24 * KiB), (116, 9 * KiB), (116, 24 * KiB)]
    ks, bs = span_corners(K, B, 0.0, 24 * KiB)          # no buffer: only the top of the band
    assert list(zip(ks, bs)) == [(9, 24 * KiB), (116, 24 * KiB)]


def _points(rng, K, B, law, noise=0.005):
    return np.asarray(K, float), np.asarray(B, float), law(np.asarray(K, float), np.asarray(B, float)) \
        * (1 + noise * rng.standard_normal(len(K)))


def test_default_is_unchanged():
    rng = np.random.default_rng(1)
    K, B, T = _points(rng, [4, 26, 88, 132] * 6, np.repeat([3, 6, 14, 22, 36, 80], 4) * KiB,
                      lambda k, b: overlap_t0(k, b, 0.02, 1 / 63e3, 1 / 4.0e6, 0.4, 2 * KiB))
    a = fit_issue_time0_overlap(K, B, T, 2 * KiB)
    b = fit_issue_time0_overlap(K, B, T, 2 * KiB, ceiling_free_below=0.0)
    assert {k: v for k, v in a.items() if k != "residuals"} == {k: v for k, v in b.items() if k != "residuals"}


def test_a_ceiling_seen_at_one_small_point_is_not_extrapolated():
    """fresh10's failure in miniature: large K only at 6 KiB, measured a little slower than the span law. The
    unconstrained fit buys that point with a ceiling that doubles T_iss0 at (116, 16 KiB); the constrained one
    stays on the span law there."""
    span = lambda k, b: overlap_t0(k, b, 0.05, 1 / 52e3, 0.0, 0.41, 9 * KiB)   # noqa: E731
    K = np.array([9, 9, 9, 9, 34, 34, 58, 58, 84, 116], float)
    B = np.array([6, 16, 44, 88, 6, 36, 6, 16, 6, 6], float) * KiB
    T = span(K, B)
    T[-1] *= 1.045                                     # (116, 6 KiB) 4.5 % slower than the line
    free = fit_issue_time0_overlap(K, B, T, 9 * KiB)
    pinned = fit_issue_time0_overlap(K, B, T, 9 * KiB, ceiling_free_below=24 * KiB)
    t0 = lambda f, k, b: overlap_t0(k, b, f["t_fixed_us"], 1 / (f["producer_issue_GBps"] * 1e3),   # noqa: E731
                                    0.0 if f["injection_GBps"] is None else 1 / (f["injection_GBps"] * 1e3),
                                    f["start_skew_us"], 9 * KiB)
    truth = span(116, 16 * KiB)
    assert free["injection_GBps"] is not None and t0(free, 116, 16 * KiB) > 1.3 * truth
    assert not _binds_below(pinned, K, 24 * KiB)
    assert t0(pinned, 116, 16 * KiB) == pytest.approx(truth, rel=0.05)


def test_a_ceiling_that_binds_above_the_band_is_still_fitted():
    """Local's kind of law: the ceiling binds only at K B beyond the band (K 132, B >= 32 KiB); the constraint
    leaves it to the fit, which recovers it."""
    law = lambda k, b: overlap_t0(k, b, 0.02, 1 / 63e3, 1 / 5.0e6, 0.40, 0.0)   # noqa: E731
    rng = np.random.default_rng(0)
    K, B, T = _points(rng, np.tile([4, 26, 88, 132], 8), np.repeat([2, 6, 12, 20, 32, 48, 64, 96], 4) * KiB, law)
    assert not _binds_below({"injection_GBps": 5000.0, "producer_issue_GBps": 63.0, "store_buffer_bytes": None,
                             "start_skew_us": 0.40}, K, 24 * KiB)
    fit = fit_issue_time0_overlap(K, B, T, 0.0, ceiling_free_below=24 * KiB)
    assert fit["injection_GBps"] == pytest.approx(5000.0, rel=0.05)
    assert not _binds_below(fit, K, 24 * KiB)


@pytest.fixture(scope="module")
def fresh10():
    points, _ = load_records(FRESH10 / "points.parquet", "point")
    return points.reset_index(drop=True)


def _fit_half(points, seed, model):
    split = split_by_rule(points, "bracket", 0.3, seed).reset_index(drop=True)
    platform, _ = fit_platform(points[split.to_numpy() == "fit"], name="t", target="pcie-host", sm_count=132,
                               capacity_law=capacity_law_of(model))
    return platform


def test_fresh10_seed1_pins_the_small_burst_end(fresh10):
    """bracket seed 1 holds (116, 16 KiB) out (measured plateau 0.61 us): gated2's fit half puts its T_iss0 at
    1.08 us; the span-constrained law within 10 % of the measurement, and (116, 26 KiB) (0.82 us) within 10 %."""
    got = {(int(k), int(b)): float(t) for k, b, t, ph in zip(fresh10["producers"], fresh10["bytes_per_producer"],
                                                              fresh10["T_iss(us)"], fresh10["phase"])
           if ph == "plateau"}
    new = _fit_half(fresh10, 1, "two-stage-gated2-span")
    assert new.injection_GBps is None
    assert new.issue_time0_us(116, 16 * KiB) == pytest.approx(got[(116, 16 * KiB)], rel=0.10)
    assert new.issue_time0_us(116, 26 * KiB) == pytest.approx(got[(116, 26 * KiB)], rel=0.10)
    old = _fit_half(fresh10, 1, "two-stage-gated2")
    assert old.issue_time0_us(116, 16 * KiB) > 1.3 * got[(116, 16 * KiB)]


def test_the_committed_record_and_its_decision():
    """data/calibration-extra/law15-posthoc.json: fresh10 bracket met at 5 of 5 seeds; not qualified, because the
    host guard fails on fresh2 and fresh5 (recorded splits) by 1.3 and 0.1 points over the limit."""
    import json
    rec = json.loads((data_dir() / "calibration-extra" / "law15-posthoc.json").read_text())
    d = rec["decision"]
    assert rec["post_hoc"] is True and d["qualified"] is False and d["model"] == "two-stage-gated2-span"
    assert d["fresh10_bracket"]["seeds_met"] == 5 and max(d["fresh10_bracket"]["T_iss_p90_by_seed"]) < 0.06
    failed = sorted(g for g, c in d["host_recorded"].items() if not all(x["held"] for x in c.values()))
    assert failed == ["fresh2", "fresh5"] and d["local_held"] is True
    law = {(r["model"], r["fit"]): r for r in rec["issue_law"]}
    for seed in range(5):
        r = law[("two-stage-gated2-span", f"bracket seed {seed}")]
        assert r["injection_GBps"] is None and abs(r["T_iss0_us"]["116,16"] / 0.608 - 1) < 0.02
    assert law[("two-stage-gated2", "bracket seed 1")]["T_iss0_us"]["116,16"] > 1.0
