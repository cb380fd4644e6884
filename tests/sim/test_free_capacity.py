"""``Platform.free_capacity_bound`` (session 8, cal6): free-running bursts without the lockstep capacity bound --
Eq. 3 alone, T_iss = max(T_iss0,free, V/R - G) -- in the model check, the simulator's free mode and the fit's
rule (``fit_robust.fit_free_law``). Platforms and files without the field keep their answers."""

import json

import numpy as np
import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.hw.microbench.spec import BurstSpec
from xstage.paths import data_dir
from xstage.records import load_records
from xstage.sim import fit as calib_fit
from xstage.sim.calib_runner import SimRunner
from xstage.sim.fit_robust import fit_free_law, held_beyond_capacity
from xstage.sim.platform import Platform, bundled_platforms, load_platform
from xstage.sim.platform_fit import split_pairs

EXTRA = data_dir() / "calibration-extra"
MiB = 1 << 20


def _host(**kw):
    """A host-like relaxing platform: R 50 GB/s, Q(132) ~ 3 MiB."""
    base = dict(name="h", sm_count=132, drain_rate_GBps=50.0, t_fixed_us=0.3, producer_issue_GBps=60.0,
                capacity_points=((1, 1.0 * MiB),), sm_outstanding_bytes=16384.0, capacity_relax_GBps=10.0,
                start_skew_us=0.3, store_buffer_bytes=2048.0, injection_GBps=6000.0, free_t_fixed_us=0.15)
    return Platform(**{**base, **kw})


def _free_row(k, b, gap, t=1.0):
    return {"phase": "free-gap", "mode": "free", "producers": k, "bytes_per_producer": b, "volume(bytes)": k * b,
            "gap(us)": gap, "gap_measured(us)": gap, "T_iss(us)": t, "period(us)": t + gap}


def test_field_is_validated_and_round_trips():
    p = _host(free_capacity_bound=False)
    d = p.to_dict()
    assert d["free_capacity_bound"] is False and Platform.from_dict(json.loads(p.to_json())) == p
    for bad in ("no", 0, 1.0):
        with pytest.raises(InputError, match="free_capacity_bound"):
            _host(free_capacity_bound=bad)
    v1 = {**Platform(name="x", sm_count=4, drain_rate_GBps=1.0, t_fixed_us=0.0, producer_issue_GBps=1.0,
                     capacity_points=((1, 1e6),)).to_dict(), "free_capacity_bound": False}
    with pytest.raises(InputError, match="not platform fields"):
        Platform.from_dict(v1)


def test_platforms_without_the_field_answer_as_before():
    """Every bundled platform and every committed platform file fitted without the field: no field written, the
    file's dict back exactly, and free_running(V) is free_running() (the model check and the simulator read the same
    platform as before). Files fitted since (the H100's local platforms of session 22 carry ``false``) come back
    exactly too."""
    every = sorted(data_dir().rglob("platform.json"))
    dicts = {f: json.loads(f.read_text()) for f in every}
    assert all(Platform.from_dict(d).to_dict() == d for d in dicts.values())
    files = [f for f in every if "free_capacity_bound" not in dicts[f]]
    assert len(files) > 10
    for f in set(every) - set(files):   # written by a fit made after the field existed (b3f8535, 2026-12-02)
        assert dicts[f]["notes"]["provenance"]["date"] >= "2026-12-02", f
    plats = [load_platform(n) for n in bundled_platforms()] + [Platform.load(f) for f in files]
    for p in plats:
        assert p.free_capacity_bound is None and "free_capacity_bound" not in p.to_dict()
        assert p.free_running(30 * MiB) == p.free_running()


def test_committed_free_check_unchanged():
    folder = EXTRA / "h200-pcie-host-wide-two-stage-gated"
    check, _ = load_records(folder / "check.parquet", "summary")
    rows = check[check["mode"] == "free"].head(20)
    now = calib_fit.model_check(rows, Platform.load(folder / "platform.json"))
    np.testing.assert_allclose(now["model_T_iss(us)"], rows["model_T_iss(us)"], rtol=1e-9)


def test_model_check_follows_eq3_without_the_bound():
    """A 28 MiB free burst: with the bound dropped, T = T_iss0,free once G >= V/R and V/R - G below; the bounded
    law (lockstep capacity ~3 MiB) says the burst waits for the drain at every gap."""
    k, b = 132, 224 * 1024
    free, bound = _host(free_capacity_bound=False), _host()
    vr = k * b / free.drain_rate_Bpus
    t0 = free.free_issue_time0_us(k, b)
    rows = pd.DataFrame([_free_row(k, b, g) for g in (0.0, 0.5 * vr, 1.2 * vr)])
    got = calib_fit.model_check(rows, free)["model_T_iss(us)"].to_numpy()
    np.testing.assert_allclose(got, [vr, 0.5 * vr, t0], rtol=1e-9)
    held = calib_fit.model_check(rows, bound)["model_T_iss(us)"].to_numpy()
    assert held[2] > 50 * t0 and held[1] > 0.6 * vr
    lock = calib_fit.model_check(rows.assign(mode="periodic"), free)["model_T_iss(us)"].to_numpy()
    assert lock[2] > 50 * t0          # lockstep bursts keep the capacity bound


@pytest.mark.parametrize("frac", [0.5, 1.3])
def test_simulator_free_mode_follows_eq3(frac):
    k, b = 132, 224 * 1024
    p = _host(free_capacity_bound=False)
    vr = k * b / p.drain_rate_Bpus
    spec = BurstSpec(k, b, frac * vr, mode="free", bursts=24)
    frame, _ = SimRunner(p).run(spec)
    t = float(np.median(frame["issue(us)"].to_numpy()[8:]))
    expect = max(p.free_issue_time0_us(k, b), vr - frac * vr)
    assert t == pytest.approx(expect, rel=0.02)
    held, _ = SimRunner(_host()).run(spec)
    assert float(np.median(held["issue(us)"].to_numpy()[8:])) > 1.3 * expect


def test_fit_rule_switches_on_only_where_free_bursts_held_beyond_capacity():
    truth = _host(free_capacity_bound=False, free_t_fixed_us=0.2)
    rows = []
    for k, b in ((132, 224 * 1024), (66, 128 * 1024), (33, 256 * 1024), (16, 64 * 1024), (132, 8192), (33, 16384)):
        vr = k * b / truth.drain_rate_Bpus
        rows += [_free_row(k, b, f * vr) for f in (0.0, 0.3, 0.6, 1.1, 1.5)]
    pts = pd.DataFrame(rows)
    pts["T_iss(us)"] = calib_fit.model_check(pts, truth)["model_T_iss(us)"].to_numpy()
    start = _host(free_t_fixed_us=None)
    fitted, info = fit_free_law(pts, start)
    assert info["unbounded"] and fitted.free_capacity_bound is False
    assert fitted.free_t_fixed_us == pytest.approx(0.2, rel=1e-6) and info["n_held_beyond_capacity"] >= 3
    bounded = _host(free_t_fixed_us=0.2)          # data from the bounded law: nothing held beyond Q(K)
    pts2 = pts.assign(**{"T_iss(us)": calib_fit.model_check(pts, bounded)["model_T_iss(us)"].to_numpy()})
    same, info2 = fit_free_law(pts2, start)
    assert same is start and not info2["unbounded"] and info2["n_held_beyond_capacity"] == 0


def _records(folder):
    return load_records(EXTRA / folder / "points.parquet", "point")[0]


def test_fit_rule_on_committed_host_records():
    """Host wide fit half: no free burst held beyond Q(K) (the grid has no large free burst after a long gap): off.
    Host fresh3 fit half (28.9 MiB free bursts issued in 4.5 us): on."""
    gated = Platform.load(EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json")
    wide = _records("h200-pcie-host-wide")
    wide_fit = wide[wide["split"].astype(str) == "fit"]
    assert held_beyond_capacity(wide_fit, gated) == 0 and fit_free_law(wide_fit, gated)[0] is gated
    f3 = _records("h200-pcie-host-fresh3")
    f3_fit = f3[split_pairs(f3, 0.3, 0).to_numpy() == "fit"]
    fitted, info = fit_free_law(f3_fit, gated)
    assert fitted.free_capacity_bound is False and info["l1_unbounded"] < 0.05 * info["l1_bounded"]


def test_fresh4_grid_is_new_and_its_preregistered_score_reproduces():
    from xstage.hw.calib.grids import GRIDS, grid_fields

    def pairs(g):
        return ({(k, b) for k in g["producers"] for b in g["sizes"]} | set(g["gap_configs"])
                | {(k, b) for k in g["iso_producers"] for b in g["iso_sizes"]})
    new = pairs(GRIDS["fresh4"])
    for other in ("default", "wide", "fresh", "fresh2", "fresh3"):
        assert not new & pairs(GRIDS[other]), other
    assert set(grid_fields("fresh4", quick=True)["gap_configs"]) <= set(GRIDS["fresh4"]["gap_configs"])
    primary = Platform.load(EXTRA / "free-s8-platforms" / "h200-pcie-host-gated-wide-fresh3.json")
    assert primary.free_capacity_bound is False
    pts = _records("h200-pcie-host-fresh4")
    err = calib_fit.model_check(pts[pts["mode"] == "free"], primary)
    scores = json.loads((EXTRA / "free-s8-scores.json").read_text())["host"]["gated/wide+fresh3"]
    for col, key in (("rel_err_T_iss", "T_iss"), ("rel_err_period", "period")):
        e = np.abs(err[col].to_numpy())
        assert np.median(e) == pytest.approx(scores[key]["median"]) and np.percentile(e, 90) == pytest.approx(
            scores[key]["p90"])
