"""knee13 (issue 15, session 12): knee11's lockstep drain gate placed per K (``lockstep_knee_ratio_points``,
``--model two-stage-kneek``): a lockstep burst waits for the drain only once V - R T_iss0 > r(K) Q(K), r read at
each K from where that K's fitted lockstep pairs switch from free to caught."""
import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.paths import data_dir
from xstage.sim import fit as calib_fit
from xstage.sim.platform import Platform, knee_ratio_at
from xstage.sim.fit_knee import KNEE_BELOW, knee_ratio_reads, knee_votes, place_knee
from xstage.sim.platform_fit import MODELS, capacity_law_of, check_and_summarize, fit_platform

from .fresh10 import fresh10_points, own_fit_p90

MiB = 2**20
K, B = 84, 26 * 1024


def _plat(**kw):
    base = dict(name="t", sm_count=132, drain_rate_GBps=52.8, t_fixed_us=0.3, producer_issue_GBps=55.0,
                capacity_points=((1, 0.6 * MiB),), sm_outstanding_bytes=24 * 1024, capacity_relax_GBps=20.0,
                lockstep_drain_gated=True, lockstep_knee_ratio_points=((34, 1.2), (84, 0.8)))
    return Platform(**{**base, **kw})


def _point(G, T=1.0, k=K, b=B):
    return {"phase": "gap", "mode": "periodic", "gap_kind": "spin", "producers": k, "bytes_per_producer": b,
            "gap(us)": G, "gap_measured(us)": G, "T_iss(us)": T, "period(us)": T + G}


def _pred(p, G, k=K, b=B):
    return float(calib_fit.model_check(pd.DataFrame([_point(G, k=k, b=b)]), p)["model_T_iss(us)"].iloc[0])


def _excess(p, k=K, b=B):
    return k * b - p.drain_rate_Bpus * p.issue_time0_us(k, b)


def test_fields_round_trip_are_left_out_while_unset_and_are_checked():
    p = _plat()
    d = json.loads(p.to_json())
    assert d["lockstep_knee_ratio_points"] == [[34, 1.2], [84, 0.8]]
    assert Platform.from_dict(d) == p
    knee = _plat(lockstep_knee_ratio_points=None)
    assert "lockstep_knee_ratio_points" not in knee.to_dict()
    assert knee.lockstep_knee_bytes(K) == knee.capacity_bytes(K)        # unset: the gate at Q(K), as knee11
    for bad, field in (({"lockstep_knee_ratio_points": ((84, 0.0),)}, "lockstep_knee_ratio_points"),
                       ({"lockstep_knee_ratio_points": ((84, -1.0),)}, "lockstep_knee_ratio_points"),
                       ({"lockstep_knee_ratio_points": ((84, 1.0), (84, 0.9))}, "lockstep_knee_ratio_points"),
                       ({"lockstep_knee_ratio_points": ()}, "lockstep_knee_ratio_points"),
                       ({"lockstep_drain_gated": None}, "lockstep_knee_ratio_points"),     # the gate it places
                       ({"lockstep_catch_band": 0.1, "lockstep_barrier_us": 1.3}, "lockstep_knee_ratio_points")):
        with pytest.raises(InputError, match=field):
            _plat(**bad)


def test_ratio_is_linear_in_K_between_points_and_flat_outside():
    pts = ((34, 1.2), (84, 0.8))
    assert knee_ratio_at(pts, 1) == 1.2 and knee_ratio_at(pts, 34) == 1.2
    assert knee_ratio_at(pts, 59) == pytest.approx(1.0)
    assert knee_ratio_at(pts, 84) == 0.8 and knee_ratio_at(pts, 132) == 0.8
    p = _plat()
    assert p.lockstep_knee_bytes(59) == pytest.approx(1.0 * p.capacity_bytes(59))


def test_the_gate_sits_at_r_times_Q():
    p = _plat()
    R, t0, Q = p.drain_rate_Bpus, p.issue_time0_us(K, B), p.capacity_bytes(K)
    ratio = _excess(p) / Q
    assert 0.8 < ratio < 1.0                                     # between r(84) Q and Q
    G = K * B / R - 3 * t0                                       # a short gap: V/R - G = 3 T_iss0
    assert _pred(p, G) == pytest.approx(3 * t0)                  # above r Q: gated2's form, caught
    assert _pred(replace(p, lockstep_knee_ratio_points=None), G) == t0     # knee11's gate at Q: free
    assert _pred(replace(p, lockstep_knee_ratio_points=((84, 1.01 * ratio),)), G) == t0
    assert _pred(replace(p, lockstep_knee_ratio_points=((84, 0.99 * ratio),)), G) == pytest.approx(3 * t0)
    above = replace(p, sm_outstanding_bytes=12 * 1024)          # the same pair above Q(K)
    r_above = _excess(above) / above.capacity_bytes(K)
    assert r_above > 1.0
    raised = replace(above, lockstep_knee_ratio_points=((84, 1.01 * r_above),))
    assert _pred(raised, 200.0) == above.issue_time0_us(K, B)    # a knee above Q(K): free at every gap
    plain = replace(above, lockstep_drain_gated=None, lockstep_knee_ratio_points=None)
    for g in (0.0, 5.0, 200.0):                                  # above both knees: gated2's form unchanged
        assert _pred(above, g) == _pred(plain, g)


def test_a_pair_votes_by_the_form_its_points_fit_and_only_where_the_forms_differ():
    p = _plat()
    R, t0 = p.drain_rate_Bpus, p.issue_time0_us(K, B)
    drain = K * B / R
    caught = [_point(drain - 3 * t0, 3 * t0), _point(drain - 4 * t0, 4.2 * t0), _point(drain + 5.0, t0)]
    b1, b2 = B + 1024, B + 2048
    t1, t2 = p.issue_time0_us(K, b1), p.issue_time0_us(K, b2)
    d1, d2 = K * b1 / R, K * b2 / R
    free = [_point(d1 - 3 * t1, 1.05 * t1, b=b1), _point(d1 - 2 * t1, t1, b=b1)]
    silent = [_point(d2 - t2, t2, b=b2), _point(d2 + 20.0, t2, b=b2)]   # the caught form is T_iss0 there
    frame = pd.DataFrame(caught + free + silent)
    votes = {v["B"]: v for v in knee_votes(frame, p)}
    assert votes[B]["caught"] is True and votes[B]["n_points"] == 2
    assert votes[b1]["caught"] is False and votes[b1]["n_points"] == 2
    assert votes[b2]["caught"] is None and votes[b2]["n_points"] == 0
    assert votes[B]["excess_bytes"] == pytest.approx(_excess(p))


def _v(e, c):
    return {"excess_bytes": e, "caught": c}


def test_place_knee_exact_cases():
    two = place_knee([_v(1.0, False), _v(4.0, True), _v(0.5, None)], 3.0)
    assert two["read"] == "two-sided" and two["ratio"] == pytest.approx(2.0 / 3.0)    # sqrt(1 * 4) / 3
    assert place_knee([_v(1.0, False), _v(2.0, False)], 3.0) == {
        "n_votes": 2, "crossed": 0, "e_below_bytes": 2.0, "e_above_bytes": None, "read": "above", "ratio_min": 2 / 3}
    below = place_knee([_v(2.0, True), _v(5.0, True)], 3.0)
    assert below["read"] == "below" and below["ratio_max"] == pytest.approx(2.0 / 3.0)
    assert place_knee([_v(2.0, None)], 3.0) == {"read": "none", "n_votes": 0}
    # a caught vote below a free one: the best cuts cross one vote each -- all caught ([0, 1)) or between 4 and 9;
    # the one whose interval lies nearest Q(K) wins
    votes = [_v(1.0, True), _v(4.0, False), _v(9.0, True)]
    mixed = place_knee(votes, 3.5)                     # [4, 9) is nearer 3.5 than [0, 1)
    assert mixed["crossed"] == 1
    assert mixed["read"] == "two-sided" and mixed["ratio"] == pytest.approx(np.sqrt(4.0 * 9.0) / 3.5)
    low = place_knee(votes, 0.5)                       # 0.5 lies in [0, 1): all caught
    assert low["read"] == "below" and low["crossed"] == 1 and low["ratio_max"] == pytest.approx(2.0)


def test_reads_interpolate_two_sided_ks_and_clip_one_sided_ones(monkeypatch):
    from xstage.sim import fit_knee
    p = _plat(lockstep_knee_ratio_points=None)
    q = {k: p.capacity_bytes(k) for k in (9, 34, 84, 116, 132)}
    votes = ([{"K": 34, "B": 1, "excess_bytes": 0.5 * q[34], "caught": False, "n_points": 1},
              {"K": 34, "B": 2, "excess_bytes": 2.0 * q[34], "caught": True, "n_points": 1},      # r(34) = 1
              {"K": 84, "B": 1, "excess_bytes": 0.25 * q[84], "caught": False, "n_points": 1},
              {"K": 84, "B": 2, "excess_bytes": 1.0 * q[84], "caught": True, "n_points": 1},      # r(84) = 0.5
              {"K": 9, "B": 1, "excess_bytes": 1.4 * q[9], "caught": False, "n_points": 1},       # r(9) >= 1.4
              {"K": 116, "B": 1, "excess_bytes": 0.3 * q[116], "caught": True, "n_points": 1},    # r(116) < 0.3
              {"K": 132, "B": 1, "excess_bytes": 0.3 * q[132], "caught": None, "n_points": 0}])   # no vote
    monkeypatch.setattr(fit_knee, "knee_votes", lambda points, platform: votes)
    reads = knee_ratio_reads(pd.DataFrame(), p)
    r = dict(reads["ratio_points"])
    assert r[34] == pytest.approx(1.0) and r[84] == pytest.approx(0.5)
    assert r[9] == pytest.approx(1.4)                    # interpolated 1.0 (flat below 34), clipped up to 1.4
    assert r[116] == pytest.approx(0.3 * KNEE_BELOW)     # interpolated 0.5 (flat above 84), clipped under 0.3
    assert r[132] == pytest.approx(0.5)                  # no vote: the interpolated ratio
    monkeypatch.setattr(fit_knee, "knee_votes", lambda points, platform: votes[4:])   # no two-sided K
    r = dict(knee_ratio_reads(pd.DataFrame(), p)["ratio_points"])
    assert r == {9: pytest.approx(1.4), 116: pytest.approx(0.3 * KNEE_BELOW), 132: 1.0}   # the line where unread


def test_kneek_fit_is_the_knee_fit_with_the_gate_read_per_K():
    from xstage.records import load_records
    points, _ = load_records(data_dir() / "calibration-extra" / "h200-pcie-host-fresh10" / "points.parquet", "point")
    kk, fit = fit_platform(points, name="kk", target="host", sm_count=132,
                           capacity_law=capacity_law_of("two-stage-kneek"))
    kn, _ = fit_platform(points, name="k", target="host", sm_count=132, capacity_law=capacity_law_of("two-stage-knee"))
    assert MODELS["two-stage-kneek"] == "relaxing-gated-overlap-kneek"
    assert kk.lockstep_drain_gated is True and kk.lockstep_catch_band is None
    for f in ("drain_rate_GBps", "t_fixed_us", "producer_issue_GBps", "start_skew_us", "capacity_points",
              "sm_outstanding_bytes"):                            # the issue law, R and Q(K) are the knee fit's
        assert getattr(kk, f) == getattr(kn, f)
    lockstep_k = sorted({int(k) for k in points.loc[points["mode"] == "periodic", "producers"]})
    assert [k for k, _ in kk.lockstep_knee_ratio_points] == lockstep_k
    assert tuple(kk.lockstep_knee_ratio_points) == fit["knee_reads"]["ratio_points"]
    _, summary = check_and_summarize(points, kk)
    assert summary["lockstep_knee_ratio_by_K"] == {str(k): r for k, r in kk.lockstep_knee_ratio_points}
    assert "lockstep_knee_ratio_points" in kk.notes
    assert Platform.from_dict(json.loads(kk.to_json())) == kk


def test_a_bad_ratio_in_a_file_is_one_line_exit_2(tmp_path, capsys):
    from xstage.cli import main
    d = json.loads(_plat().to_json())
    d["lockstep_knee_ratio_points"] = [[84, -0.5]]
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    rc = main(["sim", "bursts", "-p", str(f), "-K", "58", "-B", "32KiB", "-n", "4", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "lockstep_knee_ratio_points" in err and "-0.5" in err


def test_committed_record_decides_by_its_own_rows_and_a_seed_3_row_recomputes():
    from xstage.sim.platform_fit import split_pairs
    record = json.loads((data_dir() / "calibration-extra" / "knee13-posthoc.json").read_text())
    assert record["post_hoc"] is True and record["provenance"]["git_commit"]
    rows = [r for r in record["logo_own"]["rows"] if r["fit"] == "own"]
    p90 = {(r["model"], r["grid"], r["split"]): r["heldout_p90_rel_err_T_iss"] for r in rows}
    fresh10 = [p90[("two-stage-kneek", "fresh10", s)] for s in
               ("recorded", "pairs seed 1", "pairs seed 2", "pairs seed 3", "pairs seed 4")]
    met = sum(v <= 0.15 for v in fresh10)
    held = all(p90[("two-stage-kneek", g, "recorded")] <= max(0.15, p90[("two-stage-gated2", g, "recorded")] + 0.005)
               for g in ("wide", "fresh", "fresh2", "fresh3", "fresh5", "wide-3525cba"))
    decision = record["decision"]
    assert decision["fresh10_own_seeds_met"] == met == 1
    assert decision["qualified"] is (met >= 4 and held) is False and decision["device_call"] is None
    # fresh10 at split_pairs seed 3, the own fit half, refitted now
    points = fresh10_points()
    split = split_pairs(points, 0.3, 3).reset_index(drop=True)
    assert np.isclose(own_fit_p90(points, split, "two-stage-kneek"), p90[("two-stage-kneek", "fresh10", "pairs seed 3")],
                      rtol=1e-9)
