"""knee12 (issue 15, session 11): a lockstep burst's state carried burst to burst (``lockstep_catch_band``,
``lockstep_barrier_us``, ``--model two-stage-state``): below the knee by less than w Q(K), caught where the path
never empties between bursts (spin gap + b + T_iss0 < V/R), free where it does; otherwise the knee11 gate."""
import json
from dataclasses import replace

import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.paths import data_dir
from xstage.sim import fit as calib_fit
from xstage.sim.platform import Platform
from xstage.sim.fit_knee import CATCH_BANDS, lockstep_barrier_us
from xstage.sim.fit_two_stage import check_loss
from xstage.sim.platform_fit import MODELS, capacity_law_of, check_and_summarize, fit_platform

from .fresh10 import fresh10_points, own_fit_p90

MiB = 2**20
K, B = 84, 26 * 1024                 # below the knee of _plat (V - R T_iss0 ~ 0.83 Q(84))


def _plat(**kw):
    base = dict(name="t", sm_count=132, drain_rate_GBps=52.8, t_fixed_us=0.3, producer_issue_GBps=55.0,
                capacity_points=((1, 0.6 * MiB),), sm_outstanding_bytes=24 * 1024, capacity_relax_GBps=20.0,
                lockstep_drain_gated=True, lockstep_catch_band=0.2, lockstep_barrier_us=1.3)
    return Platform(**{**base, **kw})


def _point(G, G_measured=None, kind="spin", T=1.0):
    Gm = G if G_measured is None else G_measured
    return pd.DataFrame([{"phase": "gap", "mode": "periodic", "gap_kind": kind, "producers": K, "bytes_per_producer": B,
                          "gap(us)": G, "gap_measured(us)": Gm, "T_iss(us)": T, "period(us)": T + Gm}])


def _pred(p, G, G_measured=None, kind="spin"):
    return float(calib_fit.model_check(_point(G, G_measured, kind), p)["model_T_iss(us)"].iloc[0])


def _ratio(p):
    return (K * B - p.drain_rate_Bpus * p.issue_time0_us(K, B)) / p.capacity_bytes(K)


def test_fields_round_trip_are_left_out_while_unset_and_are_checked():
    p = _plat()
    d = json.loads(p.to_json())
    assert d["lockstep_catch_band"] == 0.2 and d["lockstep_barrier_us"] == 1.3
    assert Platform.from_dict(d) == p
    knee = _plat(lockstep_catch_band=None, lockstep_barrier_us=None)
    assert "lockstep_catch_band" not in knee.to_dict() and "lockstep_barrier_us" not in knee.to_dict()
    for bad, field in (({"lockstep_catch_band": 1.0}, "lockstep_catch_band"),
                       ({"lockstep_catch_band": -0.1}, "lockstep_catch_band"),
                       ({"lockstep_catch_band": True}, "lockstep_catch_band"),
                       ({"lockstep_barrier_us": None}, "lockstep_catch_band"),     # one without the other
                       ({"lockstep_catch_band": None}, "lockstep_barrier_us"),
                       ({"lockstep_barrier_us": -1.0}, "lockstep_barrier_us"),
                       ({"lockstep_drain_gated": None}, "lockstep_catch_band")):   # the band widens the gate
        with pytest.raises(InputError, match=field):
            _plat(**bad)


def test_inside_the_band_a_catch_is_carried_only_where_the_path_never_empties():
    p = _plat()
    R, t0 = p.drain_rate_Bpus, p.issue_time0_us(K, B)
    assert 0.8 < _ratio(p) < 1.0                               # below the knee, inside the band w = 0.2
    drain = K * B / R
    short = drain - t0 - p.lockstep_barrier_us - 1.0           # spin + b + T_iss0 ends 1 us before the drain
    Gm = drain - 3 * t0                                        # the measured gap of a caught, drain-bound burst
    assert _pred(p, short, Gm) == pytest.approx(3 * t0)        # caught: V/R - G
    assert _pred(replace(p, lockstep_catch_band=None, lockstep_barrier_us=None), short, Gm) == t0   # knee11's gate
    long = drain - t0 - p.lockstep_barrier_us + 1.0            # the path empties 1 us before the next start
    assert _pred(p, long, Gm) == t0                            # the capacity recovers: free
    assert _pred(replace(p, lockstep_barrier_us=3.0), short, Gm) == t0   # a longer barrier: the path empties
    narrow = replace(p, lockstep_catch_band=0.95 * (1.0 - _ratio(p)))    # the pair just outside the band: free
    assert _pred(narrow, short, Gm) == t0
    zero = replace(p, lockstep_catch_band=0.0)                 # w = 0: the knee11 gate exactly
    assert _pred(zero, short, Gm) == t0


def test_above_the_knee_and_without_the_band_nothing_changes():
    p = _plat()
    plain = replace(p, lockstep_drain_gated=None, lockstep_catch_band=None, lockstep_barrier_us=None)   # gated2's form
    above = replace(p, sm_outstanding_bytes=12 * 1024)          # the same pair now above the knee
    assert _ratio(above) > 1.0
    for G in (0.0, 5.0, 30.0, 200.0):
        assert _pred(above, G) == _pred(replace(above, lockstep_drain_gated=None, lockstep_catch_band=None,
                                                lockstep_barrier_us=None), G) >= above.issue_time0_us(K, B)
    pts = _point(0.0, 20.0)
    free = pts.assign(mode="free")                              # only lockstep points read the band
    assert calib_fit.model_check(free, p)["model_T_iss(us)"].iloc[0] == \
        calib_fit.model_check(free, plain)["model_T_iss(us)"].iloc[0]


def test_an_fma_gap_is_read_from_the_measured_gap_less_the_barrier():
    p = _plat()
    R, t0 = p.drain_rate_Bpus, p.issue_time0_us(K, B)
    drain = K * B / R
    Gm = drain - 3 * t0                     # spin read as Gm - b: + b + T_iss0 = drain - 2 T_iss0 < drain: caught
    assert _pred(p, 0.0, Gm, kind="fma") == pytest.approx(3 * t0)
    assert _pred(p, 0.0, drain + 5.0, kind="fma") == t0      # a long fma gap: the path empties


def test_barrier_is_the_plateau_points_measured_minus_requested_gap():
    pts = pd.DataFrame({"phase": ["plateau", "plateau", "plateau", "rate", "gap"], "mode": ["periodic"] * 5,
                        "gap(us)": [30.0, 50.0, 80.0, 0.0, 4.0], "gap_measured(us)": [31.2, 51.4, 83.0, 40.0, 40.0]})
    assert lockstep_barrier_us(pts) == pytest.approx(1.4)
    assert lockstep_barrier_us(pts[pts["phase"] != "plateau"]) == 0.0


def test_state_fit_is_the_knee_fit_plus_the_band_that_the_check_prefers():
    from xstage.records import load_records
    points, _ = load_records(data_dir() / "calibration-extra" / "h200-pcie-host-fresh10" / "points.parquet", "point")
    st, fit = fit_platform(points, name="s", target="host", sm_count=132,
                           capacity_law=capacity_law_of("two-stage-state"))
    kn, _ = fit_platform(points, name="k", target="host", sm_count=132, capacity_law=capacity_law_of("two-stage-knee"))
    assert MODELS["two-stage-state"] == "relaxing-gated-overlap-state"
    assert st.lockstep_drain_gated is True and st.lockstep_catch_band in CATCH_BANDS
    assert st.lockstep_barrier_us == lockstep_barrier_us(points)
    for f in ("drain_rate_GBps", "t_fixed_us", "producer_issue_GBps", "start_skew_us", "capacity_points",
              "sm_outstanding_bytes"):                            # the issue law, R and Q(K) are the knee fit's
        assert getattr(st, f) == getattr(kn, f)
    rho = st.capacity_relax_GBps * 1e3
    chosen = check_loss(points, st, rho)
    for w in CATCH_BANDS:                                         # no band fits the lockstep points better at rho
        assert chosen <= check_loss(points, replace(st, lockstep_catch_band=w), rho) + 1e-9
    _, summary = check_and_summarize(points, st)
    assert summary["lockstep_catch_band"] == st.lockstep_catch_band and "lockstep_barrier_us" in summary
    assert "lockstep_catch_band" in st.notes


def test_refit_with_the_state_model_and_a_bad_band_in_a_file_is_one_line_exit_2(tmp_path, capsys):
    from xstage.cli import main
    d = json.loads(_plat().to_json())
    d["lockstep_catch_band"] = 1.5
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    rc = main(["sim", "bursts", "-p", str(f), "-K", "58", "-B", "32KiB", "-n", "4", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "lockstep_catch_band" in err and "1.5" in err


def test_committed_record_decides_by_its_own_rows_and_its_seed_0_row_recomputes():
    import numpy as np
    record = json.loads((data_dir() / "calibration-extra" / "knee12-posthoc.json").read_text())
    assert record["post_hoc"] is True and record["provenance"]["git_commit"]
    own = [r for r in record["logo_own"]["rows"] if r["grid"] == "fresh10" and r["model"] == "two-stage-state"]
    assert len(own) == 5
    met = sum(r["heldout_p90_rel_err_T_iss"] <= 0.15 for r in own)
    others = {r["grid"]: r["heldout_p90_rel_err_T_iss"] for r in record["logo_own"]["rows"]
              if r["split"] == "recorded" and r["grid"] in ("wide", "fresh3")}
    qualified = met >= 4 and all(v <= 0.15 for v in others.values())
    assert record["decision"]["fresh10_own_seeds_met"] == met and record["decision"]["qualified"] is qualified
    # the recorded split's own row, refitted now
    points = fresh10_points()
    row = next(r for r in own if r["split"] == "recorded")
    assert np.isclose(own_fit_p90(points, points["split"], "two-stage-state"), row["heldout_p90_rel_err_T_iss"],
                      rtol=1e-9)
