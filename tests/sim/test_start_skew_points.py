"""skew12 (issue 15, session 11): a measured start skew as a platform input (``Platform.start_skew_points``,
``xstage sim bursts --start-skew-us``), in place of the issue law's s (K - 1)/(K + 1)."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from xstage.cli import main
from xstage.errors import InputError
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import Platform, start_skew_at

ROOT = Path(__file__).resolve().parents[2]
HOST = ROOT / "data/calibration-extra/h200-pcie-host-wide-two-stage-gated/platform.json"


def _plat(**kw):
    base = dict(name="t", sm_count=132, drain_rate_GBps=52.8, t_fixed_us=0.1, producer_issue_GBps=50.0,
                capacity_points=((1, 1e6),), start_skew_us=0.3)
    return Platform(**{**base, **kw})


def test_points_replace_the_law_linear_between_flat_outside():
    pts = ((4, 0.16), (12, 0.24))
    p = _plat(start_skew_points=pts)
    law = _plat()
    assert start_skew_at(p.start_skew_points, 1) == 0.0
    assert start_skew_at(p.start_skew_points, 2) == 0.16          # flat below the first point
    assert start_skew_at(p.start_skew_points, 8) == pytest.approx(0.20)
    assert start_skew_at(p.start_skew_points, 132) == 0.24        # flat above the last
    for K, s in ((4, 0.16), (8, 0.20), (100, 0.24)):
        B = 5000.0
        assert p.issue_time0_us(K, B) == pytest.approx(law.issue_time0_us(K, B) - 0.3 * (K - 1) / (K + 1) + s)
    assert p.issue_time0_us(1, 5000.0) == pytest.approx(0.1 + 0.1)   # one producer: no skew


def test_points_sit_inside_the_per_producer_branch_with_the_overlap_law():
    p = _plat(skew_overlaps_ceiling=True, injection_GBps=100.0, start_skew_points=((8, 0.5),))
    K, B = 8, 1000.0     # aggregate 8000 / 1e5 = 0.08 us < per producer 0.02 + 0.5
    assert p.issue_time0_us(K, B) == pytest.approx(0.1 + max(B / 50e3 + 0.5, K * B / 100e3))


def test_round_trip_left_out_while_unset_and_checked():
    p = _plat(start_skew_points=[[12, 0.24], [4, 0.16]])
    assert p.start_skew_points == ((4, 0.16), (12, 0.24))
    d = json.loads(p.to_json())
    assert d["start_skew_points"] == [[4, 0.16], [12, 0.24]] and Platform.from_dict(d) == p
    assert "start_skew_points" not in json.loads(_plat().to_json())
    v1 = json.loads(Platform("t", 132, 52.8, 0.3, 55.0, ((9, 1e6),)).to_json())
    assert v1["schema_version"] == 1 and "start_skew_points" not in v1
    assert json.loads(Platform("t", 132, 52.8, 0.3, 55.0, ((9, 1e6),),
                               start_skew_points=((4, 0.1),)).to_json())["schema_version"] == 2
    for bad in ([], [[4]], [[4.5, 0.1]], [[4, -0.1]], [[4, "x"]], [[4, 0.1], [4, 0.2]], [[True, 0.1]], 0.2):
        with pytest.raises(InputError, match="start_skew_points"):
            _plat(start_skew_points=bad)


def test_free_running_bursts_have_no_measured_skew():
    p = _plat(free_t_fixed_us=0.05, start_skew_points=((4, 0.2),))
    assert p.free_running().start_skew_points is None
    assert p.free_issue_time0_us(8, 5000.0) == pytest.approx(0.05 + 0.1)


def test_committed_platform_files_are_unchanged():
    files = sorted((ROOT / "data").rglob("platform.json")) + sorted((ROOT / "sim/platforms").glob("*.json"))
    assert len(files) > 20
    for f in files:
        d = json.loads(f.read_text())
        assert "start_skew_points" not in d
        p = Platform.from_dict(d)
        assert p.start_skew_points is None and p.to_dict() == d, f


def test_cli_start_skew_moves_a_barrier_paced_lockstep_run_by_the_difference(capsys):
    args = ["sim", "bursts", "-p", str(HOST), "-K", "8", "-B", "5KiB", "-n", "64", "--mode", "lockstep",
            "--barrier-us", "1.216", "--skip", "32", "--json"]
    assert main(args) == 0
    base = json.loads(capsys.readouterr().out)
    assert "start_skew_us" not in base
    assert main(args + ["--start-skew-us", "0.5"]) == 0
    out = json.loads(capsys.readouterr().out)
    law = Platform.load(HOST).start_skew_us * 7 / 9
    assert out["start_skew_us"] == 0.5
    assert out["T_iss_us"] == pytest.approx(base["T_iss_us"] + 0.5 - law, abs=1e-9)
    assert out["period_us"] == pytest.approx(base["period_us"] + 0.5 - law, abs=1e-9)
    # the simulator agrees with the platform it was given
    plat = replace(Platform.load(HOST), start_skew_points=((8, 0.5),))
    cfg = BurstConfig(producers=8, bytes_per_producer=5120, gap_us=0.0, bursts=64, mode="lockstep", skip=32,
                      barrier_us=1.216)
    assert simulate_bursts(plat, cfg).summary(plat)["T_iss_us"] == pytest.approx(out["T_iss_us"])


@pytest.mark.parametrize("value", ["-0.1", "abc", "nan"])
def test_cli_bad_start_skew_is_one_line_exit_2(value, capsys):
    rc = main(["sim", "bursts", "-p", str(HOST), "-K", "8", "-B", "5KiB", "-n", "8", "--mode", "lockstep",
               "--barrier-us", "1.2", "--start-skew-us", value])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--start-skew-us" in err and value in err
