"""knee17 (issue 15, session 14): ``--model two-stage-lockq`` -- span-cc with Q_shared, q_sm and rho read together
from the lockstep pairs by the model check (``fit_knee.fit_lockstep_capacity``) instead of Q(K) by Eq. 7."""
from dataclasses import replace

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.paths import data_dir
from xstage.records import load_records
from xstage.sim import fit as calib_fit
from xstage.sim.fit_knee import fit_lockstep_capacity, lockstep_issue_times_us
from xstage.sim.platform_fit import LOCKQ_LAW, MODELS, capacity_law_of, check_model, fit_platform
from xstage.sim.split_sweeps import split_by_rule

KiB, MiB = 1024, 2**20
EXTRA = data_dir() / "calibration-extra"


def _points(name):
    points, _ = load_records(EXTRA / name / "points.parquet", "point")
    return points.reset_index(drop=True)


def _fit(points, model):
    return fit_platform(points, name="t", target="pcie-host", sm_count=132, capacity_law=capacity_law_of(model))


def _lockstep(points, plat):
    lock = points[points["mode"] == "periodic"].dropna(subset=["T_iss(us)"])
    lock = lock[lock["T_iss(us)"] > 0]
    K = lock["producers"].to_numpy(float)
    B = lock["bytes_per_producer"].to_numpy(float)
    T0 = np.array([plat.issue_time0_us(int(k), b) for k, b in zip(K, B)])
    return lock, K, K * B, T0, np.maximum(lock["gap_measured(us)"].to_numpy(float), 0.0)


def test_model_name_and_law():
    assert check_model("two-stage-lockq") == "two-stage-lockq"
    assert capacity_law_of("two-stage-lockq") == LOCKQ_LAW == "relaxing-gated-overlap-span-cc-lockq"
    assert MODELS["two-stage-gated2-span-cc"] == "relaxing-gated-overlap-span-cc" and MODELS["v1"] == "points"


@pytest.fixture(scope="module")
def fresh11():
    points = _points("h200-pcie-host-fresh11")
    split = split_by_rule(points, "bracket", 0.3, 2).reset_index(drop=True)
    plat, fit = _fit(points[split.to_numpy() == "fit"], "two-stage-lockq")
    return points, split, plat, fit


def test_vectorised_lockstep_form_is_the_model_check(fresh11):
    """``lockstep_issue_times_us`` is the model check's lockstep periodic T_iss on every fresh11 point, caught and
    free, at the fitted platform (the fit's loss is the product's check, vectorised)."""
    points, _, plat, _ = fresh11
    lock, K, V, T0, G = _lockstep(points, plat)
    got = lockstep_issue_times_us(K, V, T0, G, plat.drain_rate_Bpus, plat.shared_capacity_bytes(1),
                                  plat.sm_outstanding_bytes, plat.capacity_relax_GBps * 1e3)
    want = calib_fit.model_check(lock, plat)["model_T_iss(us)"].to_numpy(float)
    assert np.allclose(got, want, rtol=1e-9) and (got > 1.5 * T0).sum() > 40 and (got == T0).sum() > 40


def test_fit_recovers_a_known_line_and_rho(fresh11):
    """Points whose T_iss is the form itself at a known (Q_shared, q_sm, rho): the search finds a line and rho that
    reproduce them within 1 %."""
    points, split, plat, _ = fresh11
    fit_half = points[split.to_numpy() == "fit"]
    lock, K, V, T0, G = _lockstep(fit_half, plat)
    truth = (1.3 * MiB, 14.0 * KiB, 16e3)
    synth = fit_half.copy()
    synth.loc[lock.index, "T_iss(us)"] = lockstep_issue_times_us(K, V, T0, G, plat.drain_rate_Bpus, *truth)
    lq = fit_lockstep_capacity(synth, plat)
    got = lockstep_issue_times_us(K, V, T0, G, plat.drain_rate_Bpus, lq["Q_shared_bytes"], lq["q_sm_bytes"],
                                  lq["rho_Bpus"])
    assert np.max(np.abs(got / synth.loc[lock.index, "T_iss(us)"].to_numpy(float) - 1)) < 0.01
    assert lq["n_points"] == len(lock)


def test_fresh11_bracket_seed2_places_the_knee_post_hoc(fresh11):
    """Post hoc (knee17 table 1): at fresh11 `bracket` seed 2 span-cc misses (62, 36 KiB) plateau by +297 % (p90
    34.2 %); the line read from the lockstep pairs puts that pair free and the held-out p90 under 15 %. The platform
    carries the fitted line and rho and says so in its notes."""
    points, split, plat, fit = fresh11
    lq = fit["lockstep_capacity"]
    assert plat.shared_capacity_bytes(1) == pytest.approx(lq["Q_shared_bytes"])
    assert plat.sm_outstanding_bytes == pytest.approx(lq["q_sm_bytes"])
    assert plat.capacity_relax_GBps == pytest.approx(lq["rho_Bpus"] / 1e3)
    assert "lockstep_capacity" in plat.notes
    check = calib_fit.model_check(points, plat)
    held = (split.to_numpy() == "heldout") & (check["mode"] == "periodic").to_numpy()
    err = np.abs(check.loc[held, "rel_err_T_iss"].to_numpy(float))
    assert np.percentile(err, 90) < 0.15
    plateau = check[(check["phase"] == "plateau") & (check["producers"] == 62)
                    & (check["bytes_per_producer"] == 36 * KiB)]
    assert (plateau["model_T_iss(us)"] == plateau["T_iss0(us)"]).all()


def test_other_models_unchanged_by_the_new_law(fresh11):
    """span-cc on the same fit half is fitted as before (its Q line from Eq. 7; no lockstep_capacity)."""
    points, split, plat, _ = fresh11
    old, fit = _fit(points[split.to_numpy() == "fit"], "two-stage-gated2-span-cc")
    assert "lockstep_capacity" not in fit and "lockstep_capacity" not in old.notes
    assert old.t_fixed_us == pytest.approx(plat.t_fixed_us) and old.drain_rate_GBps == pytest.approx(
        plat.drain_rate_GBps)
    assert old.sm_outstanding_bytes != pytest.approx(plat.sm_outstanding_bytes)


def test_lockq_fits_a_grid_whose_eq7_line_is_flat_in_k():
    # fresh4's recorded fit half: Eq. 7's two-stage line puts q_sm at 0, so a relaxing capacity cannot be built on it.
    # lockq reads its own line from the lockstep pairs and discards Eq. 7's relax rate, so it must not stop there
    # (before session 15 it raised on that discarded fit).
    points = _points("h200-pcie-host-fresh4")
    half = points[points["split"] == "fit"].reset_index(drop=True)
    with pytest.raises(InputError, match="sm_outstanding_bytes"):
        _fit(half, "two-stage-gated2-span-cc")        # the Eq. 7 law itself cannot relax a flat line
    plat, fit = _fit(half, "two-stage-lockq")
    lq = fit["lockstep_capacity"]
    assert lq["q_sm_bytes"] > 0 and lq["n_points"] == int((half["mode"] == "periodic").sum())
    assert plat.sm_outstanding_bytes == pytest.approx(lq["q_sm_bytes"])
    assert plat.capacity_relax_GBps == pytest.approx(lq["rho_Bpus"] / 1e3)
