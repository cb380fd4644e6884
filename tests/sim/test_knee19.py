"""knee19 (issue 15, session 14): the zero-gap catch rules on top of ``two-stage-lockq``
(``benchmarks/calib_knee19.py``): which points they touch, what each predicts, how their constants are chosen on
the fit half, the rescore through ``split_errors`` and the clear/not-clear verdict."""
import numpy as np
import pandas as pd
import pytest

from .bench_scripts import load_script

k19 = load_script("calib_knee19")


def _terms():
    """Three zero-gap rows: free (excess 0.5 of the line, deficit 0.5 us), caught near the knee (0.95, 3 us),
    caught past it (1.2, 5 us)."""
    return {"T0": np.array([1.0, 1.0, 1.0]), "V": np.array([100.0, 100.0, 100.0]), "R": 10.0,
            "G": np.array([8.5, 6.0, 4.0]), "caught": np.array([1.5, 4.0, 6.0]), "free": np.array([1.0, 1.0, 1.2]),
            "excess": np.array([50.0, 95.0, 120.0]), "Q_shared": 60.0, "Kq_sm": np.array([40.0, 40.0, 40.0])}


def test_lockq_rule_is_the_caught_form():
    np.testing.assert_array_equal(k19.predict("lockq", _terms(), None), [1.5, 4.0, 6.0])


def test_ratio_rule_switches_at_c_times_the_line():
    t = _terms()
    np.testing.assert_array_equal(k19.predict("ratio", t, 0.9), [1.0, 4.0, 6.0])
    np.testing.assert_array_equal(k19.predict("ratio", t, 1.0), [1.0, 1.0, 6.0])


def test_line_rule_scales_the_two_parts_separately():
    t = _terms()   # cap = a 60 + c 40
    np.testing.assert_array_equal(k19.predict("line", t, (1.0, 1.0)), [1.0, 1.0, 6.0])
    np.testing.assert_array_equal(k19.predict("line", t, (0.5, 0.5)), [1.0, 4.0, 6.0])


def test_deficit_rule_reads_the_measured_gap():
    t = _terms()   # V/R - G - T0 = 0.5, 3, 5 us
    np.testing.assert_array_equal(k19.predict("deficit", t, 1.5), [1.0, 4.0, 6.0])
    np.testing.assert_array_equal(k19.predict("deficit-fixed", t, 4.0), [1.0, 1.0, 6.0])


def _check():
    """Four lockstep pairs at zero gap (rows 0-3) and one plateau point (row 4); measured free at 1.0 us for the
    first two, caught for the others."""
    return pd.DataFrame({"mode": ["periodic"] * 5, "gap(us)": [0.0, 0.0, 0.0, 0.0, 50.0],
                         "producers": [10, 20, 30, 40, 10], "bytes_per_producer": [1024] * 5,
                         "T_iss(us)": [1.0, 1.0, 4.0, 6.0, 1.0], "period(us)": [10.0] * 5,
                         "gap_measured(us)": [9.0, 8.5, 6.0, 4.0, 50.0], "model_T_iss(us)": [1.5, 2.0, 4.0, 6.0, 1.0],
                         "model_period(us)": [10.5, 10.5, 10.0, 10.0, 51.0],
                         "rel_err_T_iss_eq3": [0.0] * 5, "rel_err_period_eq3": [0.0] * 5})


def test_zero_gap_mask_takes_only_lockstep_points_at_zero_requested_gap():
    c = _check().assign(mode=["periodic", "free", "periodic", "periodic", "periodic"])
    assert k19.zero_gap(c).tolist() == [True, False, True, True, False]


def test_choose_reads_the_fit_half_only():
    c = _check()
    t = {"T0": np.ones(5), "V": np.full(5, 100.0), "R": 10.0, "G": c["gap_measured(us)"].to_numpy(),
         "caught": np.array([1.5, 2.0, 4.0, 6.0, 1.0]), "free": np.ones(5)}
    fit_all = np.ones(5, dtype=bool)
    theta = k19.choose("deficit", c, t, fit_all)   # deficits 0, 0.5, 3, 5: any theta in [0.5, 3) is exact
    assert 0.5 <= theta < 3.0
    assert np.allclose(k19.predict("deficit", t, theta)[:4], [1.0, 1.0, 4.0, 6.0])
    only_caught = np.array([False, False, True, True, False])   # nothing free on the fit half: theta stays lowest
    assert k19.choose("deficit", c, t, only_caught) == 0.0
    assert k19.choose("deficit-fixed", c, t, fit_all) == k19.DEFICIT_FIXED_US
    assert k19.choose("lockq", c, t, fit_all) is None


def test_rescore_replaces_zero_gap_rows_and_their_period():
    c = _check()
    split = pd.Series(["heldout"] * 5)
    pred = np.array([1.0, 1.0, 4.0, 6.0, 99.0])   # row 4 is not at zero gap: untouched
    r = k19.rescore(c.assign(**{"rel_err_T_iss": 0.0, "rel_err_period": 0.0}), pred, split)
    assert r["heldout_median_rel_err_T_iss"] == 0.0 and r["heldout_p90_rel_err_T_iss"] == 0.0
    assert r["misses"] == []
    r = k19.rescore(c, np.array([1.5, 2.0, 4.0, 6.0, 1.0]), split)
    assert [m[:2] for m in r["misses"]] == [[10, 1], [20, 1]]


def test_decide_needs_four_seeds_on_every_grid():
    rows = [{"rule": "deficit", "grid": g, "seed": s, "all_four": g == "fresh11" or s < 3}
            for g in k19.GRIDS for s in k19.SEEDS]
    d = k19.decide(rows)
    assert d["deficit"] == {"seeds_met": {"fresh11": 5, "fresh12": 3}, "clears": False}
    rows = [dict(r, all_four=True) for r in rows]
    assert k19.decide(rows)["deficit"]["clears"] is True


def test_separation_names_the_quantity_whose_ranges_do_not_overlap():
    base = {"plateau_free": True, "x": 1.0, "K": 50, "B_KiB": 32, "period_over_VR": 1.0, "unheld_us": 0.5}
    rows = [dict(base, zero_caught=False, deficit_us=0.8), dict(base, zero_caught=False, deficit_us=1.1, K=120),
            dict(base, zero_caught=True, deficit_us=2.5, K=60), dict(base, zero_caught=True, deficit_us=4.0, x=2.0)]
    s = k19.separation(rows)
    assert s["n_free"] == 2 and s["n_caught"] == 1      # x = 2.0 lies outside the band
    assert s["deficit_us"]["separates"] and not s["K"]["separates"]
    assert s["deficit_us"]["free"] == pytest.approx([0.8, 1.1])
