"""The free-running law's own terms (session 9, cal9): ``Platform.free_producer_issue_GBps``,
``free_store_buffer_bytes``, ``free_injection_GBps`` (false: no ceiling) and ``free_drain_rate_GBps`` -- read by the
model check, the simulator's free mode and ``Platform.free_running`` -- and the fit's rule
(``fit_free.fit_free_issue_law``). Platforms and files without them keep their answers; host is left as it is."""

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
from xstage.sim.fit_free import beats_lockstep, fit_free_issue_law
from xstage.sim.platform import Platform, bundled_platforms, load_platform

EXTRA = data_dir() / "calibration-extra"
MiB, KiB = 1 << 20, 1024
FIELDS = ("free_producer_issue_GBps", "free_store_buffer_bytes", "free_injection_GBps", "free_drain_rate_GBps")


def _local(**kw):
    """A local-like platform: lockstep R 3500 GB/s (a lower bound), I 5000 GB/s, free bursts unbounded."""
    base = dict(name="l", sm_count=132, drain_rate_GBps=3500.0, t_fixed_us=0.03, producer_issue_GBps=62.0,
                capacity_points=((1, 1.0),), sm_outstanding_bytes=26000.0, capacity_relax_GBps=14.0,
                start_skew_us=0.39, injection_GBps=5000.0, free_t_fixed_us=0.07, free_capacity_bound=False)
    return Platform(**{**base, **kw})


def _free_row(k, b, gap, t=1.0, period=None, phase="free-gap"):
    return {"phase": phase, "mode": "free", "producers": k, "bytes_per_producer": b, "volume(bytes)": k * b,
            "gap(us)": gap, "gap_measured(us)": gap, "T_iss(us)": t, "period(us)": t + gap if period is None else period}


def test_fields_are_validated_and_round_trip():
    p = _local(free_producer_issue_GBps=64.0, free_store_buffer_bytes=4096.0, free_injection_GBps=False,
               free_drain_rate_GBps=4500.0)
    d = p.to_dict()
    assert d["free_injection_GBps"] is False and Platform.from_dict(json.loads(p.to_json())) == p
    q = _local(free_injection_GBps=8000.0)
    assert Platform.from_dict(json.loads(q.to_json())).free_injection_GBps == 8000.0
    for name, bad in (("free_injection_GBps", True), ("free_injection_GBps", -1.0), ("free_drain_rate_GBps", "4500"),
                      ("free_producer_issue_GBps", 0.0), ("free_store_buffer_bytes", -1.0)):
        with pytest.raises(InputError, match=name):
            _local(**{name: bad})
    with pytest.raises(InputError, match="free_drain_rate_GBps"):      # the free drain must stay above rho
        _local(free_drain_rate_GBps=10.0)
    v1 = {**Platform(name="x", sm_count=4, drain_rate_GBps=1.0, t_fixed_us=0.0, producer_issue_GBps=1.0,
                     capacity_points=((1, 1e6),)).to_dict(), "free_drain_rate_GBps": 2.0}
    with pytest.raises(InputError, match="not platform fields"):
        Platform.from_dict(v1)


def test_platforms_without_the_fields_answer_as_before():
    """Every bundled and committed platform (this work's own pre-registered files apart): the file's dict back exactly;
    one without the fields gives from free_running the platform it gave before (no free_* override); one with them
    was written by the product's free-law fit (a calibration folder whose summary.json records the same terms)."""
    files = sorted(f for f in data_dir().rglob("*.json") if "free-s9-platforms" not in str(f)
                   and (f.name == "platform.json" or "platforms" in f.parent.name) and f.name != "fit-info.json")
    without = []
    for f in files:
        d = json.loads(f.read_text())
        assert Platform.from_dict(d).to_dict() == d, f
        if set(FIELDS) & set(d):
            summary = json.loads((f.parent / "summary.json").read_text())
            assert f.name == "platform.json" and all(summary.get(k) == d[k] for k in FIELDS if k in d), f
        else:
            without.append(f)
    assert len(without) > 10
    for f in without:
        d = json.loads(f.read_text())
        p = Platform.from_dict(d)
        for v in (None, 30 * MiB):
            fr = p.free_running(v)
            assert (fr.producer_issue_GBps, fr.store_buffer_bytes, fr.injection_GBps, fr.drain_rate_GBps) == (
                p.producer_issue_GBps, p.store_buffer_bytes, p.injection_GBps, p.drain_rate_GBps)
    for name in bundled_platforms():
        p = load_platform(name)
        assert all(getattr(p, f) is None for f in FIELDS) and not set(FIELDS) & set(p.to_dict())


def test_committed_free_checks_unchanged():
    """The committed gated folders' checks: today's model check gives their free and lockstep answers exactly."""
    for folder in ("h200-local-wide-two-stage-gated", "h200-pcie-host-wide-two-stage-gated"):
        check, _ = load_records(EXTRA / folder / "check.parquet", "summary")
        rows = pd.concat([check[check["mode"] == "free"].head(30), check[check["mode"] == "periodic"].head(10)])
        now = calib_fit.model_check(rows, Platform.load(EXTRA / folder / "platform.json"))
        np.testing.assert_allclose(now["model_T_iss(us)"], rows["model_T_iss(us)"], rtol=1e-9)


def test_free_running_reads_the_free_terms():
    p = _local(free_producer_issue_GBps=64.0, free_store_buffer_bytes=4096.0, free_injection_GBps=False,
               free_drain_rate_GBps=4500.0)
    fr = p.free_running(40 * MiB)
    assert (fr.producer_issue_GBps, fr.store_buffer_bytes, fr.injection_GBps, fr.drain_rate_GBps) == (
        64.0, 4096.0, None, 4500.0)
    assert fr.t_fixed_us == 0.07 and fr.start_skew_us == 0.0 and fr.capacity_bytes(130) == 40 * MiB
    # no ceiling: (130, 320 KiB) issues at one producer's rate, where the lockstep ceiling 5 TB/s would bind
    assert p.free_issue_time0_us(130, 320 * KiB) == pytest.approx(0.07 + (320 * KiB - 4096) / 64e3)
    assert p.issue_time0_us(130, 320 * KiB) > 130 * 320 * KiB / 5e6          # lockstep law untouched
    assert _local(free_injection_GBps=7000.0).free_issue_time0_us(130, 320 * KiB) == pytest.approx(
        0.07 + 130 * 320 * KiB / 7e6)


def test_model_check_uses_the_free_drain_rate():
    """A 40 MiB free burst: V/R_free - G while the drain binds, the free issue law after long gaps; lockstep rows of
    the same platform keep the lockstep R and laws."""
    k, b = 130, 320 * KiB
    p = _local(free_producer_issue_GBps=64.0, free_store_buffer_bytes=0.0, free_injection_GBps=False,
               free_drain_rate_GBps=4500.0)
    vr = k * b / 4500e3
    t0 = p.free_issue_time0_us(k, b)
    rows = pd.DataFrame([_free_row(k, b, g) for g in (0.2, 0.5 * vr, 2.0 * vr)])
    got = calib_fit.model_check(rows, p)
    np.testing.assert_allclose(got["model_T_iss(us)"], [vr - 0.2, max(t0, 0.5 * vr), t0], rtol=1e-9)
    np.testing.assert_allclose(got["V/R(us)"], vr, rtol=1e-12)
    before = calib_fit.model_check(rows, _local())["model_T_iss(us)"].to_numpy()
    assert before[0] == pytest.approx(k * b / 3500e3 - 0.2) and before[2] > 1.4 * t0   # lockstep R and I
    lock = calib_fit.model_check(rows.assign(mode="periodic"), p)
    lock0 = calib_fit.model_check(rows.assign(mode="periodic"), _local())
    np.testing.assert_allclose(lock["model_T_iss(us)"], lock0["model_T_iss(us)"], rtol=1e-12)


@pytest.mark.parametrize("frac", [0.3, 1.4])
def test_simulator_free_mode_follows_the_free_terms(frac):
    k, b = 130, 320 * KiB
    p = _local(free_producer_issue_GBps=64.0, free_store_buffer_bytes=0.0, free_injection_GBps=False,
               free_drain_rate_GBps=4500.0)
    vr = k * b / 4500e3
    frame, _ = SimRunner(p).run(BurstSpec(k, b, frac * vr, mode="free", bursts=24))
    t = float(np.median(frame["issue(us)"].to_numpy()[8:]))
    assert t == pytest.approx(max(p.free_issue_time0_us(k, b), vr - frac * vr), rel=0.02)


def _synthetic(truth):
    rows = []
    for k, b in ((130, 320 * KiB), (94, 288 * KiB), (46, 120 * KiB), (130, 24 * KiB), (22, 40 * KiB)):
        vr = k * b / truth.free_running().drain_rate_Bpus
        rows += [_free_row(k, b, f * vr) for f in (0.1, 0.4, 0.8, 1.2, 1.6)]
    for k in (22, 46, 94, 130):
        rows += [_free_row(k, b * KiB, 0.0, phase="free-rate") for b in (8, 13, 40, 120, 200)]
    pts = pd.DataFrame(rows)
    c = calib_fit.model_check(pts, truth)
    return pts.assign(**{"T_iss(us)": c["model_T_iss(us)"].to_numpy(), "period(us)": c["model_period(us)"].to_numpy()})


def test_fit_rule_recovers_the_free_terms_and_leaves_lockstep_data_alone():
    truth = _local(free_t_fixed_us=0.2, free_producer_issue_GBps=63.0, free_store_buffer_bytes=8192.0,
                   free_injection_GBps=False, free_drain_rate_GBps=4550.0)
    pts = _synthetic(truth)
    start = _local()
    assert min(beats_lockstep(pts, start).values()) >= 3
    fitted, info = fit_free_issue_law(pts, start)
    assert info["adopted"] and info["l1_after"] < 0.01 * info["l1_before"]
    assert fitted.free_drain_rate_GBps == pytest.approx(4550.0, rel=0.01)
    assert fitted.free_producer_issue_GBps == pytest.approx(63.0, rel=0.01)
    assert fitted.free_t_fixed_us == pytest.approx(0.2, abs=0.01) and "free_law" in fitted.notes
    assert fitted.issue_time0_us(130, 32 * KiB) == start.issue_time0_us(130, 32 * KiB)   # lockstep law kept
    lock = _synthetic(start)              # free points that follow the lockstep law: nothing beats it
    same, info2 = fit_free_issue_law(lock, start)
    assert same is start and not info2["adopted"] and max(info2["above_ceiling"], info2["above_drain"]) < 3


def _records(folder):
    return load_records(EXTRA / folder / "points.parquet", "point")[0]


def test_fit_rule_on_committed_records_host_unchanged_local_switched():
    """No host free point beats the host's lockstep law (far below I = 18.7 TB/s, drain-bound at R): cal6's
    pre-registered host platform is left as it is. Local wide fit half: switched, the free drain ~4.5 TB/s."""
    host = Platform.load(EXTRA / "free-s8-platforms" / "h200-pcie-host-gated-wide-fresh3.json")
    for grid in ("wide", "fresh3", "fresh4", "fresh5"):
        pts = _records(f"h200-pcie-host-{grid}")
        assert beats_lockstep(pts, host) == {"above_ceiling": 0, "above_drain": 0}, grid
        assert fit_free_issue_law(pts, host)[0] is host
    local = Platform.load(EXTRA / "free-s8-platforms" / "h200-local-gated-wide-fresh3.json")
    wide = _records("h200-local-wide")
    fitted, info = fit_free_issue_law(wide[wide["split"].astype(str) == "fit"], local)
    assert info["adopted"] and 4300 < fitted.free_drain_rate_GBps < 4800


def test_fresh7_grid_is_new():
    from xstage.hw.calib.grids import GRIDS, grid_fields

    def pairs(g):
        return ({(k, b) for k in g["producers"] for b in g["sizes"]} | set(g["gap_configs"])
                | {(k, b) for k in g["iso_producers"] for b in g["iso_sizes"]})
    new = pairs(GRIDS["fresh7"])
    for other in ("default", "wide", "fresh", "fresh2", "fresh3", "fresh4", "fresh5"):
        assert not new & pairs(GRIDS[other]), other
        assert not set(GRIDS["fresh7"]["producers"]) & set(GRIDS[other]["producers"]), other
    g = GRIDS["fresh7"]
    assert g["free_gaps"] == len(g["gap_configs"]) and max(k * b for k, b in g["gap_configs"]) > 40 * MiB
    assert set(grid_fields("fresh7", quick=True)["gap_configs"]) <= set(g["gap_configs"])


def test_preregistered_platforms_reproduce():
    """The committed pre-registered platforms (free-s9-platforms) are what the rule fits on the named records."""
    from xstage.sim.fit_free import fit_law, with_law
    local = Platform.load(EXTRA / "free-s8-platforms" / "h200-local-gated-wide-fresh3.json")
    pts = pd.concat([_records("h200-local-fresh4"), _records("h200-local-fresh5")], ignore_index=True)
    committed = Platform.load(EXTRA / "free-s9-platforms" / "h200-local-gated-current.json")
    law = fit_law(pts)
    refit = with_law(local, law)
    for f in ("free_t_fixed_us",) + FIELDS:
        assert getattr(refit, f) == pytest.approx(getattr(committed, f), rel=1e-9), f
    assert committed.injection_GBps == local.injection_GBps and committed.drain_rate_GBps == local.drain_rate_GBps


def test_fresh7_preregistered_scores_reproduce():
    """The fresh7 run (records at the pre-registration commit) scored as pre-registered: local `current` and cal6's
    host platform on every free point, the figures in fresh7-scores.json; both rules met."""
    scores = json.loads((EXTRA / "fresh7-scores.json").read_text())
    plats = {"local": Platform.load(EXTRA / "free-s9-platforms" / "h200-local-gated-current.json"),
             "host": Platform.load(EXTRA / "free-s8-platforms" / "h200-pcie-host-gated-wide-fresh3.json")}
    for target, folder in (("local", "h200-local-fresh7"), ("host", "h200-pcie-host-fresh7")):
        pts, meta = load_records(EXTRA / folder / "points.parquet", "point")
        assert meta["provenance"]["git_commit"].startswith("8123b17")
        err = calib_fit.model_check(pts[pts["mode"] == "free"], plats[target])
        assert len(err) == 55
        key = "current" if target == "local" else "cal6"
        for col, name in (("rel_err_T_iss", "T_iss"), ("rel_err_period", "period")):
            e = np.abs(err[col].to_numpy())
            assert np.median(e) == pytest.approx(scores[target][key][name]["median"])
            assert np.percentile(e, 90) == pytest.approx(scores[target][key][name]["p90"])
        assert scores["decision"][target]["met"]
