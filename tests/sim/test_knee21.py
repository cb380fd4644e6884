"""knee21 (issue 15, session 15): ``benchmarks/calib_knee21.py``: the point-wise median of two runs (a run with
itself is the run; points matched by position, not requested gap; a point in one run only kept), ``trim-all``
reduces to the product's fit where nothing lies over 1.3x the issue law and withholds exactly the named points, the
scorer is knee20's on unmodified lockq, and the decision rule."""
import json
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xstage.sim.repeat_median import median_run

from .bench_scripts import load_script

k21 = load_script("calib_knee21")
EXTRA = Path(__file__).resolve().parents[2] / "data" / "calibration-extra"
KiB = 1024


@pytest.fixture(scope="module")
def fresh12():
    return k21.grid_points("host", "fresh12"), k21.grid_points("host", "fresh12-r2")


def test_the_median_of_a_run_with_itself_is_the_run(fresh12):
    c, _ = fresh12
    med, info = median_run({"a": c, "b": c.copy()})
    assert med.drop(columns="n_runs").equals(c)
    assert info == {"points_per_run": {"a": 286, "b": 286}, "points": 286, "in_every_run": 286, "in_one_run_only": 0}


def test_fresh12s_runs_match_point_for_point_and_the_median_is_their_mean(fresh12):
    c, r2 = fresh12
    med, info = median_run({"c": c, "r2": r2})
    assert info["in_every_run"] == 286 and info["in_one_run_only"] == 0
    ok = (c["T_iss(us)"] > 0) & (r2["T_iss(us)"] > 0)
    np.testing.assert_allclose(med["T_iss(us)"][ok], ((c["T_iss(us)"] + r2["T_iss(us)"]) / 2)[ok], rtol=1e-12)
    assert (med["producers"] == c["producers"]).all() and (med["split"] == c["split"]).all()


def _pts(rows):
    cols = ["phase", "mode", "gap_kind", "producers", "bytes_per_producer", "volume(bytes)", "gap(us)", "T_iss(us)",
            "period(us)", "split"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows])


def test_points_match_by_position_and_a_point_in_one_run_only_keeps_its_values():
    a = _pts([("gap", "periodic", "spin", 42, 38 * KiB, 42 * 38 * KiB, 1.544, 2.0, 4.0, "fit"),
              ("gap", "periodic", "spin", 42, 38 * KiB, 42 * 38 * KiB, 3.088, 3.0, 5.0, "fit"),
              ("plateau", "periodic", "spin", 17, 14 * KiB, 17 * 14 * KiB, 50.0, 0.6, 51.0, "heldout")])
    b = _pts([("gap", "periodic", "spin", 42, 38 * KiB, 42 * 38 * KiB, 1.5488, 4.0, 6.0, "fit"),   # gap 0.3 % apart
              ("gap", "periodic", "spin", 42, 38 * KiB, 42 * 38 * KiB, 3.0976, -1.0, 7.0, "fit"),  # T <= 0: not held
              ("rate", "periodic", "spin", 68, 20 * KiB, 68 * 20 * KiB, 0.0, 1.5, 2.5, "fit")])    # in b only
    med, info = median_run({"a": a, "b": b})
    assert info == {"points_per_run": {"a": 3, "b": 3}, "points": 4, "in_every_run": 1, "in_one_run_only": 3}
    assert med["T_iss(us)"].tolist() == [3.0, 3.0, 0.6, 1.5]
    assert med["period(us)"].tolist() == [5.0, 5.0, 51.0, 2.5]            # b's second point is not held: a's values
    assert med["gap(us)"].tolist() == pytest.approx([1.5464, 3.088, 50.0, 0.0])
    assert med["n_runs"].tolist() == [2, 1, 1, 1]
    assert med["split"].tolist() == ["fit", "fit", "heldout", "fit"]
    bad = b.assign(split=["heldout", "fit", "fit"])
    with pytest.raises(ValueError, match="design column 'split' differs between runs at 1 points"):
        median_run({"a": a, "b": bad})


def test_withheld_fitter_drops_exactly_the_named_points_and_nothing_else():
    mod = types.SimpleNamespace(fit_issue_time0=lambda K, B, T, *a, **kw: (K.tolist(), B.tolist(), T.tolist(), a, kw),
                                other=lambda x: x + 1)
    w = k21._Withheld(mod, "fit_issue_time0", {(17, 160 * KiB, 38.272)})
    K, B, T = np.array([17.0, 17.0, 42.0]), np.array([160.0, 14.0, 160.0]) * KiB, np.array([38.272, 0.58, 38.272])
    assert w.fit_issue_time0(K, B, T, 1, skew=True) == ([17.0, 42.0], [14 * KiB, 160 * KiB], [0.58, 38.272], (1,),
                                                        {"skew": True})
    assert w.other(1) == 2


@pytest.fixture(scope="module")
def fresh12_seed2(fresh12):
    c, _ = fresh12
    split = k21.split_of(c, "bracket", 2)
    half = c[split.to_numpy() == "fit"]
    return c, split, half, k21.fit_model(half, k21.MODEL, "knee21")


def test_trim_all_is_the_product_fit_where_no_plateau_point_lies_over_the_law(fresh12_seed2):
    _, _, half, (plat, fit) = fresh12_seed2
    high = replace(plat, t_fixed_us=1e6)               # no plateau point over 1.3 x this law
    assert k21.over_law(half, high) == frozenset()
    out, out_fit, info = k21.fit_trim_all(half, (high, fit))
    assert out is high and out_fit is fit and info == {"withheld_rounds": [], "withheld": [], "refits": 0,
                                                       "converged": True}
    with k21.withholding(frozenset()):                 # the stand-in with nothing withheld is the product itself
        same, _ = k21.fit_model(half, k21.MODEL, "knee21")
    assert same == plat
    assert not isinstance(k21.platform_fit.calib_fit, k21._Withheld)   # restored after the block


def test_scorer_is_knee20s_on_unmodified_lockq(fresh12_seed2):
    c, split, _, (plat, _) = fresh12_seed2
    want = next(r for r in json.loads((EXTRA / "knee20-posthoc.json").read_text())["rows"]
                if r["grid"] == "fresh12" and r["seed"] == 2 and r["candidate"] == "lockq")
    got = k21._row(plat, c, split, candidate="lockq")
    for k in k21.FIGS:
        assert got[f"heldout_{k}"] == pytest.approx(want[f"heldout_{k}"], abs=1e-12)
    assert got["misses"] == want["misses"] and got["all_four"] == want["all_four"] is False


def _r(grid, cand, fitted, judged, seed, met):
    return {"grid": grid, "candidate": cand, "fitted_on": fitted, "judged_on": judged, "seed": seed, "all_four": met}


def test_decide_applies_the_written_rule():
    rows = []
    for s in k21.SEEDS:
        rows += [_r("fresh12", "repeat-median", "median", "median", s, s != 0),
                 _r("fresh12", "repeat-median", "median", "c", s, False),
                 _r("fresh12", "repeat-median", "median", "r2", s, True),
                 _r("fresh12", "trim-all", "c", "c", s, s > 2), _r("fresh12", "trim-all", "r2", "r2", s, True),
                 _r("fresh12", "lockq", "c", "c", s, False), _r("fresh12", "lockq", "r2", "r2", s, True)]
        for g in ("fresh11", "fresh10"):
            rows += [_r(g, "lockq", "c", "c", s, True), _r(g, "trim-all", "c", "c", s, s != 4)]
    d = k21.decide(rows)
    assert d["per_candidate"]["repeat-median"] == {"seeds_met": {"fresh12 median": 4},
                                                   "guards": {"fresh11": 5, "fresh10": 5}, "ready": True}
    assert d["per_candidate"]["trim-all"] == {"seeds_met": {"fresh12 c": 2, "fresh12 r2": 5},
                                              "guards": {"fresh11": 4, "fresh10": 4}, "ready": False}
    assert d["reported"] == {"repeat-median judged on fresh12 c": 0, "repeat-median judged on fresh12 r2": 5}
    assert d["frozen"] == "repeat-median"
    assert k21.decide([r for r in rows if not (r["candidate"] == "repeat-median" and r["seed"] < 2)])["frozen"] is None


# ---- the pre-registered score action, on STAND-IN records (a test only: fresh12's two committed runs in fresh13's
# place; the real score reads the later device call's fresh13 runs) --------------------------------------------------

def test_score_on_stand_in_records_is_the_posthoc_repeat_median(tmp_path):
    folders = {"r1": EXTRA / "h200-pcie-host-fresh12", "r2": EXTRA / "h200-pcie-host-fresh12-r2"}
    out = k21.score_fresh(folders, grid="fresh12", seeds=(4,), log=lambda *a, **k: None)
    assert out["runs"]["r1"]["records"] == "data/calibration-extra/h200-pcie-host-fresh12" and out["missing"] == []
    assert out["runs"]["r2"]["gpu_uuid"] and out["runs"]["r1"]["git_commit"]
    want = {(r["candidate"], r["judged_on"]): r for r in json.loads((EXTRA / "knee21-posthoc.json").read_text())["rows"]
            if r["grid"] == "fresh12" and r["seed"] == 4 and r["candidate"] in ("lockq", "repeat-median")}
    names = {"r1": "c", "r2": "r2", "median": "median"}         # the posthoc named the committed run c
    got = {(r["candidate"], r["judged_on"]): r for r in out["rows"]}
    assert {(c, names[j]) for c, j in got} == set(want)
    for (c, j), r in got.items():
        for k in k21.FIGS:
            assert r[f"heldout_{k}"] == pytest.approx(want[(c, names[j])][f"heldout_{k}"], abs=1e-12), (c, j, k)
    d = out["decision"]
    assert d["seeds_met"] == 1 and d["verdict"] == "not met"            # one seed scored here: 1 of 5 is not >= 4
    assert d["reported"] == {"repeat-median judged on r1": 1, "repeat-median judged on r2": 1, "lockq on r1 alone": 0,
                             "lockq on r2 alone": 1}


def test_score_refuses_another_grids_records_and_needs_two_runs(tmp_path):
    with pytest.raises(ValueError, match="are not --grid fresh13's"):
        k21.score_fresh({"r1": EXTRA / "h200-pcie-host-fresh12"}, grid="fresh13", seeds=())
    out = k21.score_fresh({"r1": EXTRA / "h200-pcie-host-fresh12", "r2": tmp_path / "absent"}, grid="fresh12",
                          seeds=())
    assert out["missing"] == ["r2"] and out["decision"]["verdict"] == "not measured"
    assert out["decision"]["seeds_met"] is None
