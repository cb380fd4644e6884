"""knee18 (issue 15, session 14): the host calibration grid's agreement with itself (``benchmarks/calib_knee18.py``):
matching points across runs, one run as the prediction of another, the instrument's held-out figures and the
pre-registered verdict."""
import numpy as np
import pandas as pd
import pytest

from .bench_scripts import load_script

k18 = load_script("calib_knee18")
KiB = 1024


def _run(t_rate, t_plateau, gap=(5.0, 6.0)):
    """A tiny run: two pairs, a rate and a plateau point each, a two-step gap sweep on the first, one free point."""
    rows = []
    for (k, b), tr, tp in zip(((10, 8 * KiB), (20, 16 * KiB)), t_rate, t_plateau):
        rows += [{"phase": "rate", "mode": "periodic", "producers": k, "bytes_per_producer": b, "T_iss(us)": tr,
                  "period(us)": 10.0},
                 {"phase": "plateau", "mode": "periodic", "producers": k, "bytes_per_producer": b, "T_iss(us)": tp,
                  "period(us)": 20.0}]
    rows += [{"phase": "gap", "mode": "periodic", "producers": 10, "bytes_per_producer": 8 * KiB, "T_iss(us)": t,
              "period(us)": 30.0} for t in gap]
    rows.append({"phase": "free-rate", "mode": "free", "producers": 10, "bytes_per_producer": 8 * KiB,
                 "T_iss(us)": 99.0, "period(us)": 99.0})
    return pd.DataFrame(rows)


def test_matched_joins_lockstep_points_by_phase_pair_and_step():
    m = k18.matched({"c": _run((1.0, 2.0), (1.0, 4.0)), "r2": _run((1.1, 2.0), (1.0, 2.0), gap=(5.0, 9.0))})
    assert len(m) == 6 and set(m["mode"]) == {"periodic"}     # the free point is not a lockstep point
    gap = m[m["phase"] == "gap"].sort_values("step")
    assert gap["step"].tolist() == [0, 1] and gap["T_iss(us)_r2"].tolist() == [5.0, 9.0]


def test_one_run_predicts_another_with_the_sign_of_a_model_error():
    m = k18.matched({"c": _run((1.0, 2.0), (1.0, 4.0)), "r2": _run((1.1, 2.0), (1.0, 2.0), gap=(5.0, 9.0))})
    e = dict(zip(zip(m["phase"], m["producers"], m["step"]), k18.rel(m, "r2", "c")))
    assert e[("rate", 10, 0)] == pytest.approx(0.1) and e[("plateau", 20, 0)] == pytest.approx(-0.5)
    assert e[("gap", 10, 1)] == pytest.approx(0.5)
    s = k18.share_within(m, ["c", "r2"])
    # r2 -> c: 4 of 6 within 15 % (the (20, 16) plateau -0.5 and the second gap step +0.5 are not); c -> r2: the
    # same points (+1.0, -0.444), 4 of 6
    assert s["by_pair"] == {"r2->c": pytest.approx(4 / 6), "c->r2": pytest.approx(4 / 6)} and s["n"] == 12


def test_instrument_heldout_is_the_median_over_ordered_pairs_of_each_pairs_p90():
    runs = {"c": _run((1.0, 2.0), (1.0, 4.0)), "r2": _run((1.0, 2.0), (1.0, 2.0)), "r3": _run((1.0, 2.0), (1.0, 4.0))}
    m = k18.matched(runs)
    mask = k18.heldout_mask(m, {(20, 16 * KiB)})      # the second pair: its rate 2.0 everywhere, plateau 4 / 2 / 4
    assert mask.sum() == 2
    r = k18.instrument_heldout(m, list(runs), mask)
    # |e| at the plateau: c<->r3 0; r2->c, r2->r3 0.5; c->r2, r3->r2 1.0; the rate point 0 everywhere
    p90 = {p: v["T_iss"]["p90"] for p, v in r["by_pair"].items()}
    assert p90["c->r3"] == 0 and p90["r2->c"] == pytest.approx(0.45) and p90["c->r2"] == pytest.approx(0.9)
    assert r["p90_T_iss"] == pytest.approx(np.median([0, 0, 0.45, 0.45, 0.9, 0.9]))
    assert r["median_period"] == 0 and r["p90_period"] == 0
    vc = k18.instrument_heldout(m, list(runs), mask, truth="c")
    assert set(vc["by_pair"]) == {"r2->c", "r3->c"} and vc["p90_T_iss"] == pytest.approx(np.median([0.45, 0]))
    # mean of the others at the plateau: c (4) predicted by 3.0 (-0.25), r2 (2) by 4.0 (+1.0), r3 (4) by 3.0 (-0.25)
    assert r["mean_of_others_T_iss"]["p90"] == pytest.approx(np.median([0.225, 0.9, 0.225]))


def _row(p90, med=0.02):
    return {"p90_T_iss": p90, "median_T_iss": med, "p90_period": 0.02, "median_period": 0.01}


def test_verdict_is_the_preregistered_rule():
    assert k18.verdict([_row(0.2), _row(0.16), _row(0.1), _row(0.1), _row(0.1)]) == "beyond the instrument"
    assert k18.verdict([_row(0.2), _row(0.15), _row(0.1), _row(0.1), _row(0.1)]) == "within the instrument"
    assert k18.verdict([_row(0.1, 0.06), _row(0.1, 0.06), _row(0.1), _row(0.1), _row(0.1)]) == "at the edge"
    assert k18.overall({"fresh11": "beyond the instrument", "fresh12": "beyond the instrument"}) == \
        "beyond the instrument"
    assert k18.overall({"fresh11": "within the instrument", "fresh12": "within the instrument"}) == "a model gap"
    assert k18.overall({"fresh11": "at the edge", "fresh12": "beyond the instrument"}).startswith("neither claimed")
    assert k18.overall({"fresh12": "beyond the instrument"}) == \
        "neither claimed: fresh11 not measured; fresh12 beyond the instrument"   # one grid alone claims nothing


def test_a_pair_reproduces_only_if_every_repeat_is_within_15_percent_at_both_points():
    runs = {"c": _run((1.0, 2.0), (1.0, 4.0)), "r2": _run((1.1, 2.0), (1.0, 2.0)), "r3": _run((1.14, 2.0), (1.0, 4.0))}
    rows = k18.pair_rows(runs, ((10, 8), (20, 16)))
    assert [r["reproduces"] for r in rows] == [True, False]
    assert rows[1]["plateau_r2_us"] == 2.0 and rows[0]["rate_r3_us"] == 1.14


def test_the_split_of_a_committed_grid_is_the_same_on_a_copy_in_another_order():
    """The held-out pairs depend on the grid's design, not on the measured values or the row order."""
    pts = k18.grid_points("host", "fresh12")
    shuffled = pts.sample(frac=1.0, random_state=3).reset_index(drop=True)
    shuffled["T_iss(us)"] = shuffled["T_iss(us)"] * 1.3
    for seed in (0, 3):
        held = k18.held_pairs_of(pts, seed)
        assert len(held) == 15 and k18.held_pairs_of(shuffled, seed) == held
    m = k18.matched({"c": pts, "r2": pts})
    assert len(m) == int((pts["mode"] == "periodic").sum()) and np.nanmax(np.abs(k18.rel(m, "r2", "c"))) == 0


def test_the_committed_repeat_of_fresh12_matches_point_for_point_and_names_its_knee_pairs():
    """Golden slice of the records: fresh12 and its repeat r2 match on every lockstep point and hold out the same
    pairs; (68, 32 KiB) is free at zero gap in both (0.96 / 0.93 us), (100, 28)'s plateau moves 4.21 -> 2.90 us."""
    runs = k18.runs_of("fresh12", repeats=("r2",))
    assert list(runs) == ["c", "r2"]
    m = k18.matched(runs)
    assert len(m) == int((runs["c"]["mode"] == "periodic").sum()) == 201
    assert all(k18.held_pairs_of(runs["r2"], s) == k18.held_pairs_of(runs["c"], s) for s in (0, 2))
    rows = {(r["K"], r["B_KiB"]): r for r in k18.pair_rows(runs, ((68, 32), (100, 28)))}
    assert rows[(68, 32)]["reproduces"] and rows[(68, 32)]["rate_r2_us"] == pytest.approx(0.928)
    assert not rows[(100, 28)]["reproduces"] and rows[(100, 28)]["plateau_r2_us"] == pytest.approx(2.896)
