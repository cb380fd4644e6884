"""knee11 (issue 15, session 10): the lockstep drain gate (``lockstep_drain_gated``, ``--model two-stage-knee``)
and the per-K capacity with one relaxing floor (``capacity_floor_bytes``, ``--model two-stage-knee2``)."""
import json
import subprocess
import sys
from dataclasses import replace

import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.paths import data_dir
from xstage.sim import fit as calib_fit, model, model_two_stage
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import Platform
from xstage.sim.platform_fit import MODELS, capacity_law_of, check_model, fit_platform

MiB = 2**20


def _plat(**kw):
    base = dict(name="t", sm_count=132, drain_rate_GBps=52.8, t_fixed_us=0.3, producer_issue_GBps=55.0,
                capacity_points=((9, 0.9 * MiB), (58, 2.0 * MiB), (116, 2.9 * MiB)), capacity_relax_GBps=18.0,
                capacity_floor_bytes=0.8 * MiB)
    return Platform(**{**base, **kw})


def _lockstep(K, B, G):
    return pd.DataFrame([{"phase": "gap", "mode": "periodic", "producers": K, "bytes_per_producer": B,
                          "gap(us)": G, "gap_measured(us)": G, "T_iss(us)": 1.0, "period(us)": 1.0 + G}])


def _pred(p, K, B, G):
    return float(calib_fit.model_check(_lockstep(K, B, G), p)["model_T_iss(us)"].iloc[0])


def test_fields_round_trip_are_left_out_while_unset_and_are_checked():
    p = _plat(lockstep_drain_gated=True)
    d = json.loads(p.to_json())
    assert d["capacity_floor_bytes"] == 0.8 * MiB and d["lockstep_drain_gated"] is True
    assert Platform.from_dict(d) == p and d["schema_version"] == 2
    plain = json.loads(Platform("t", 132, 52.8, 0.3, 55.0, ((9, 1e6),)).to_json())
    assert plain["schema_version"] == 1 and "capacity_floor_bytes" not in plain and "lockstep_drain_gated" not in plain
    with pytest.raises(InputError, match="lockstep_drain_gated"):
        _plat(lockstep_drain_gated="yes")
    with pytest.raises(InputError, match="capacity_floor_bytes"):
        _plat(capacity_floor_bytes=-1.0)
    with pytest.raises(InputError, match="capacity_floor_bytes"):   # the fluid queue needs a floor above zero
        _plat(capacity_floor_bytes=0.0)
    with pytest.raises(InputError, match="capacity_floor_bytes"):
        _plat(capacity_relax_GBps=None)
    with pytest.raises(InputError, match="capacity_relax_GBps"):       # without a floor it still needs q_sm
        _plat(capacity_floor_bytes=None)


def test_floor_is_one_figure_capped_at_q_of_k_and_reaches_the_simulator():
    p = _plat()
    assert p.queue_options(58) == {"relax_Bpus": 18e3, "floor_bytes": 0.8 * MiB}
    assert p.queue_options(4)["floor_bytes"] == p.capacity_bytes(4) < 0.8 * MiB     # never above Q(K)
    K, B = 116, 36 * 1024                              # above the knee: caught, relaxing to the floor
    V, R, t0, Q = K * B, p.drain_rate_Bpus, p.issue_time0_us(K, B), p.capacity_bytes(K)
    T = model_two_stage.relaxing_isolated_issue_time_us(t0, V, R, Q, 0.8 * MiB, 18e3)
    assert T > model.isolated_issue_time_us(t0, V, R, Q)
    run = simulate_bursts(p, BurstConfig(K, B, 0.0, 4, mode="lockstep", barrier_us=1.0)).summary(p)
    assert run["T_iss_us"] == pytest.approx(T, rel=1e-9)


def test_gate_drops_the_drain_term_below_the_knee_only():
    gated = _plat(lockstep_drain_gated=True)
    plain = _plat()
    R = plain.drain_rate_Bpus
    K, B = 84, 26 * 1024                         # below the knee: V - R T_iss0 < Q(84) (~2.45 MiB)
    V, t0 = K * B, plain.issue_time0_us(K, B)
    assert V - R * t0 < plain.capacity_bytes(K)
    G = V / R - 1.5 * t0                         # a gap a little short of the drain: Eq. 3 says V/R - G = 1.5 T_iss0
    assert _pred(plain, K, B, G) == pytest.approx(1.5 * t0)
    assert _pred(gated, K, B, G) == t0           # the gate: a burst that never fills the X-Stage issues at T_iss0
    K, B = 116, 36 * 1024                        # above the knee: the gate changes nothing
    V, t0 = K * B, plain.issue_time0_us(K, B)
    assert V - R * t0 > plain.capacity_bytes(K)
    for G in (0.0, 5.0, V / R):
        assert _pred(gated, K, B, G) == _pred(plain, K, B, G) >= t0
    # the knee is a step: just below it T_iss0, just above it slower by what the relaxing capacity costs
    t0 = gated.issue_time0_us(116, 26 * 1024)
    q = 116 * 26 * 1024 - R * t0
    below, above = replace(gated, capacity_points=((116, q * 1.01),)), replace(gated, capacity_points=((116, q * 0.9),))
    assert _pred(below, 116, 26 * 1024, 0.0) == t0 < _pred(above, 116, 26 * 1024, 0.0)


def test_models_are_only_extended_and_bad_model_is_one_line_exit_2(capsys):
    assert capacity_law_of("two-stage-knee") == "relaxing-gated-overlap-knee"
    assert capacity_law_of("two-stage-knee2") == "relaxing-gated-overlap-knee-points"
    assert {k: v for k, v in MODELS.items() if k not in ("two-stage-knee", "two-stage-knee2", "two-stage-state",
                                                       "two-stage-kneek", "two-stage-gated2-span", "two-stage-gated2-cc",
                                                         "two-stage-gated2-span-cc", "two-stage-lockq")} == {
        "v1": "points", "two-stage": "shared+per_sm", "two-stage-relax": "relaxing",
        "two-stage-gated": "relaxing-gated", "two-stage-robust": "relaxing-robust",
        "two-stage-gated2": "relaxing-gated-overlap", "two-stage-gated3": "relaxing-gated-overlap-exp"}
    with pytest.raises(InputError, match="model"):
        check_model("two-stage-knee3")
    from xstage.cli import main
    rc = main(["calibrate", "--refit", "--records", str(data_dir() / "calibration-extra" / "h200-pcie-host-fresh5"),
               "--model", "two-stage-knee3", "--out", "/nonexistent/knee11"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "two-stage-knee3" in err


def test_platform_file_with_a_bad_gate_is_one_line_exit_2(tmp_path, capsys):
    from xstage.cli import main
    d = json.loads(_plat().to_json())
    d["lockstep_drain_gated"] = "yes"
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    rc = main(["sim", "bursts", "-p", str(f), "-K", "58", "-B", "32KiB", "-n", "4", "--json"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "lockstep_drain_gated" in err


def test_knee_fits_are_gated2_plus_their_law():
    from xstage.records import load_records
    points, _ = load_records(data_dir() / "calibration-extra" / "h200-pcie-host-fresh5" / "points.parquet", "point")
    g2, _ = fit_platform(points, name="g2", target="host", sm_count=132, capacity_law="relaxing-gated-overlap")
    kn, _ = fit_platform(points, name="k", target="host", sm_count=132, capacity_law="relaxing-gated-overlap-knee")
    k2, _ = fit_platform(points, name="k2", target="host", sm_count=132,
                         capacity_law="relaxing-gated-overlap-knee-points")
    assert g2.lockstep_drain_gated is None and kn.lockstep_drain_gated is k2.lockstep_drain_gated is True
    # the issue law, R and the two-stage line are gated2's; only rho (chosen under the gate) may differ
    assert (kn.t_fixed_us, kn.drain_rate_GBps, kn.sm_outstanding_bytes, kn.capacity_points) == (
        g2.t_fixed_us, g2.drain_rate_GBps, g2.sm_outstanding_bytes, g2.capacity_points)
    assert k2.sm_outstanding_bytes is None and k2.capacity_floor_bytes == pytest.approx(g2.capacity_points[0][1])
    assert sorted(k for k, _ in k2.capacity_points) == sorted(set(points.loc[points["phase"] == "isolated",
                                                                              "producers"].astype(int)))
    assert all(q > 0 for _, q in k2.capacity_points) and "knee11" in k2.notes["capacity_points"]


def test_free_bursts_see_no_floor_without_a_capacity_bound():
    free = _plat(free_capacity_bound=False).free_running(8e6)
    assert free.capacity_relax_GBps is None and free.capacity_floor_bytes is None and free.queue_options(58) == {}


def test_knee2_refits_a_grid_with_no_shared_stage_without_a_traceback(tmp_path):
    """On local HBM the two-stage line's shared stage fits to zero; the floor it gives knee2 is kept above zero, so
    the refit writes its platform (session 22: it raised ValueError inside the fluid queue)."""
    proc = subprocess.run([sys.executable, "-m", "xstage.cli", "calibrate", "--refit", "--records",
                           str(data_dir() / "calibration-extra" / "h100-local"), "--model", "two-stage-knee2",
                           "--out", str(tmp_path / "out"), "--quiet"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    platform = json.loads((tmp_path / "out" / "platform.json").read_text())
    assert platform["capacity_floor_bytes"] >= 1.0
