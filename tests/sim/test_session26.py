"""Session 26 (docs/calibration/h100-broad24.md, call25 and call26): call25's folders are one call on a fourth H100,
its committed scores follow from them, the figures the docs quote from knee-band26 are the record's; the call25 /
call26 device scripts branch on the GPU as written (stubbed nvidia-smi and python3), their scorers refuse to
overwrite; a zero issue time is the limit of a short one (what broke call26's first fresh4 / fresh7 fits)."""

import json

import pytest

from xstage.paths import data_dir
from xstage.records import load_records

from .bench_scripts import load_script, run_device_script

EXTRA = data_dir() / "calibration-extra"
CALL25 = ("h100-pcie-host-fresh11", "h100-pcie-host-fresh12", "h100-pcie-host-fresh13")
EARLIER_H100 = ("h100-pcie-host", "h100-pcie-host-fresh", "h100-pcie-host-fresh2")   # cards 1, 2, 3


def _uuid(folder: str) -> str:
    return load_records(EXTRA / folder / "points.parquet", "point")[1]["provenance"]["gpu"]["gpu_uuid"]


def test_call25_folders_are_one_call_on_a_fourth_h100():
    assert {_uuid(f) for f in CALL25} == {"GPU-6f00ac3f-d8d6-d7a0-9108-4cab94d16951"}
    assert len({_uuid(f) for f in EARLIER_H100} | {_uuid(CALL25[0])}) == 4


def test_call25_scores_follow_from_the_folders():
    rec = json.loads((EXTRA / "call25-scores.json").read_text())
    again = load_script("calib_call25").score("H100", log=lambda *a, **k: None)
    assert rec["primary"] == again["primary"] and rec["primary"]["verdict"] == "met"
    assert (rec["primary"]["A_far"]["pairs_off"], rec["primary"]["A_far"]["pairs"]) == (1, 66)      # the docs' figures
    assert (rec["primary"]["B_near"]["pairs_off"], rec["primary"]["B_near"]["pairs"]) == (27, 33)
    assert json.loads(json.dumps(again["bins"])) == rec["bins"]
    for f in CALL25:
        kept, now = rec["per_folder"][f]["carried"]["every_point"], again["per_folder"][f]["carried"]["every_point"]
        assert kept == pytest.approx(now, rel=1e-9)
    assert rec["per_folder"]["h100-pcie-host-fresh11"]["carried"]["every_point"]["p90_rel_err_T_iss"] == pytest.approx(
        1.634, abs=5e-4)


def test_the_figures_the_docs_quote_from_knee_band26_are_the_records():
    bins = {gpu: {b["bin"]: b for b in e["bins"]}
            for gpu, e in json.loads((EXTRA / "knee-band26.json").read_text())["gpus"].items()}
    h100 = bins["H100"]
    assert (h100["(1, 1.1]"]["pairs_off"], h100["(1, 1.1]"]["pairs"]) == (16, 18)
    assert (h100["(2, 3]"]["pairs_off"], h100["(2, 3]"]["pairs"]) == (13, 25)
    assert (h100["(1.25, 1.5]"]["pairs_off"], h100["(1.25, 1.5]"]["pairs"]) == (31, 37)
    far = ("(-inf, 0.5]", "(0.5, 0.8]", "(3, inf]")
    assert max(bins[gpu][b]["share_off"] for gpu in bins for b in far) < 0.095   # "at most 9 %"


@pytest.mark.parametrize("script", ["call25.sh", "call26.sh"])
def test_the_h100_calls_run_nothing_on_another_gpu(tmp_path, script):
    proc, calls, out = run_device_script(tmp_path, script, "NVIDIA A100-SXM4-80GB")
    assert proc.returncode == 3 and "nothing run" in proc.stdout and not calls and not any(out.iterdir())


@pytest.mark.parametrize("script", ["call25.sh", "call26.sh"])
def test_the_h100_calls_run_call24s_h200_branch_on_an_h200(tmp_path, script):
    proc, calls, out = run_device_script(tmp_path, script, "NVIDIA H200")
    names = [c.split("--name ")[1].split()[0] for c in calls]
    assert proc.returncode == 0 and names == ["h200-pcie-host-fresh2-c24", "h200-pcie-host-fresh3-c24",
                                              "h200-local-wide-c24", "h200-pcie-host-fresh5-c24",
                                              "h200-local-fresh2-c24"]
    assert (out / "res.tgz").is_file()


@pytest.mark.parametrize("args,grids", [((), ["fresh10", "fresh14", "fresh4", "fresh7"]),
                                        (("fresh4", "fresh7"), ["fresh4", "fresh7"]),
                                        (("fresh4", "wide"), ["fresh4"])])
def test_call26_measures_the_grids_it_is_given_on_an_h100(tmp_path, args, grids):
    proc, calls, _ = run_device_script(tmp_path, "call26.sh", "NVIDIA H100 80GB HBM3", *args)
    assert proc.returncode == 0
    assert [c.split("--grid ")[1].split()[0] for c in calls] == grids
    assert all(f"--name h100-pcie-host-{g} " in c and "--model two-stage-gated2" in c for c, g in zip(calls, grids))
    assert ("skipped" in proc.stdout) == ("wide" in args)


@pytest.mark.parametrize("script", ["calib_call25", "calib_call26", "calib_call27", "calib_call27c", "calib_rate27",
                                    "calib_pool27"])   # the last four: session 27
def test_the_call_scorers_refuse_an_existing_scores_file(tmp_path, script):
    import subprocess
    import sys

    from .bench_scripts import BENCHMARKS
    taken = tmp_path / "scores.json"
    taken.write_text("{}")
    proc = subprocess.run([sys.executable, str(BENCHMARKS / f"{script}.py"), "--json", str(taken)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "exists" in proc.stderr and taken.read_text() == "{}"


def test_call26_free_check_reads_only_free_points_and_needs_all_four():
    mod = load_script("calib_call26")
    r = mod.free_check(folders=("h100-pcie-host-fresh2", "h100-pcie-host-fresh3"))   # the pre-registration's figure
    assert r["n_free_points"] == 331 and r["met"]
    assert r["free_p90_rel_err_T_iss"] == pytest.approx(0.1005, abs=5e-4)
    for folders in (("h100-pcie-host-fresh5",), ("h100-pcie-host-fresh11",), ("h100-pcie-host",)):
        r = mod.free_check(folders=folders)
        assert r["met"] == (r["n_free_points"] > 0 and all(r[k] <= limit for k, limit in mod.FREE_KEYS)), folders


def test_call26_mid_share_counts_the_half_open_bin():
    mid = load_script("calib_call26").mid_share([{"knee_ratio": r, "off": o} for r, o in
                                                 [(1.5, True), (1.51, True), (3.0, False), (3.01, True), (None, True)]])
    assert (mid["pairs"], mid["pairs_off"]) == (2, 1)


@pytest.mark.parametrize("exponential", [False, True])
def test_a_zero_issue_time_is_the_limit_of_a_short_one(exponential):
    from xstage.sim import model_two_stage as m
    args = (4e6, 52_000.0, 1e6, 6e5, 8_000.0, exponential)   # V, R, Q, floor, rho
    at_zero = m.relaxing_isolated_issue_time_us(0.0, *args)
    assert at_zero == pytest.approx(m.relaxing_isolated_issue_time_us(1e-9, *args), rel=1e-9)
    assert m.relaxing_isolated_end_level_bytes(0.0, *args) == pytest.approx(
        m.relaxing_isolated_end_level_bytes(1e-9, *args), rel=1e-9)


def test_the_model_check_reads_a_free_running_law_with_no_issue_time():
    """What stopped call26's fresh4 / fresh7 fits: a free-running law with t_free = 0 puts a burst inside the store
    buffer at T_iss0 = 0, and the relaxing capacity's closed form divided by it."""
    from dataclasses import replace

    import pandas as pd

    from xstage.sim.fit import model_check
    from xstage.sim.platform import load_platform
    pool = load_platform(EXTRA / "h100-pcie-host-pool24" / "platform.json")
    law = replace(pool, free_t_fixed_us=0.0, store_buffer_bytes=32 * 1024.0, injection_GBps=None,
                  free_capacity_bound=None)
    K, B = 132, 32 * 1024                                    # inside the store buffer, and V above Q(K)
    assert law.free_running().issue_time0_us(K, B) == 0.0 and K * B > law.capacity_bytes(K)
    point = {"phase": "free-rate", "mode": "free", "gap_kind": "spin", "producers": K, "bytes_per_producer": B,
             "gap(us)": 0.0, "gap_measured(us)": 0.0, "T_iss(us)": 80.0, "period(us)": 82.0}
    check = model_check(pd.DataFrame([point]), law)
    assert check["model_T_iss(us)"].notna().all() and (check["model_T_iss(us)"] > 0).all()
