"""MoE records: tile rows from a kernel log, kernel rows, the simulator's prediction, the summary, the CLI."""

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.compare import moe_records as R
from xstage.records import moe as RB
from xstage.sim.workloads.moe_layout import MoeProblem, dispatch_layout
from xstage.records import load_records, save_records
from xstage.sim.platform import load_platform
from xstage.sim.replay import ReplayConfig, replay
from xstage.sim.schedules import make_moe_schedule

PROBLEM = MoeProblem(256, 128, 600, routing="skewed", seed=2)


def _fake_log(schedule, layout):
    """A kernel tile log (ns) built from a replay: what the instrumented kernel would write."""
    kind = schedule.tiles[:, 0]
    plat = R.scaled_b200(schedule.num_sms, 25.0)
    res = replay(schedule, np.where(kind == 1, 3.0, 6.0), layout.tile_remote_bytes(schedule.tiles), plat,
                 ReplayConfig(staging_slots=1, local_epilogue_us=0.5, remote_epilogue_us=1.0))
    a = res.arrays
    ns = lambda x: np.round(np.asarray(x) * 1e3 + 5e9).astype(np.int64)  # noqa: E731
    log = np.stack([a["sm"], a["sm"] + 100, a["seq"], ns(a["ml_start"] - a["dep_wait"]), ns(a["ml_start"]),
                    ns(a["ml_end"]), ns(a["epi_start"]), ns(a["epi_end"])], axis=1)
    return log, res


def test_tile_frame_from_a_log():
    lay = dispatch_layout(PROBLEM)
    s = make_moe_schedule("interleaved", lay.grid, 8, lead_rows=2)
    log, res = _fake_log(s, lay)
    f = RB.tile_frame(lay, s.tiles, log, schedule="interleaved", remote=True)
    sim = res.tiles()
    assert len(f) == len(s.tiles) and set(f["kind"]) == {"L1", "L2"}
    assert f["mainloop_start(us)"].min() == 0.0
    np.testing.assert_allclose(np.sort(f["span(us)"]), np.sort(sim["span(us)"]), atol=2e-3)
    assert (f.loc[f["kind"] == "L1", "bytes_remote"] == 0).all()
    assert f["bytes_remote"].sum() == lay.combine_bytes()["remote_bytes"]
    # gap to the next mainloop of the same program = its epilogue + the next tile's waits
    first = f[(f["sm"] == 0)].sort_values("seq")
    assert first["gap_to_next(us)"].iloc[0] == pytest.approx(first["mainloop_start(us)"].iloc[1]
                                                           - first["mainloop_end(us)"].iloc[0])
    assert math.isnan(first["gap_to_next(us)"].iloc[-1])
    local = RB.tile_frame(lay, s.tiles, log, schedule="interleaved", remote=False)
    assert (local["bytes_remote"] == 0).all() and local["schedule"].iloc[0] == "interleaved_local"
    t = RB.tile_timings(local)
    assert t["l1_us"] == pytest.approx(6.0, abs=1e-3) and t["l2_us"] == pytest.approx(3.0, abs=1e-3)
    with pytest.raises(InputError):
        RB.tile_frame(lay, s.tiles, log[:-1], schedule="interleaved", remote=True)


def _kernel_rows(times: dict, problem=PROBLEM, sim=None, measured=True):
    rows = []
    for variant, t in times.items():
        extra = {"lead_rows": 2, "num_sms": 8, "baseline": "torch._grouped_mm"}
        if measured:
            extra.update({"measured_l1(us)": 6.0, "measured_l2(us)": 3.0, "measured_l1_epilogue(us)": 0.5,
                          "measured_l2_epilogue(us)": 1.0})
        if sim:
            extra.update(sim)
        rows.append(RB.kernel_row(problem, variant, [t, t * 1.01, t * 0.99], **extra))
    return rows


def test_kernel_rows_summary_and_roundtrip(tmp_path):
    a = _kernel_rows({"expert_wave": 120.0, "interleaved": 100.0, "expert_wave_local": 80.0,
                      "interleaved_local": 70.0, "grouped_mm": 56.0},
                     sim={"sim_wave(us)": 110.0, "sim_int(us)": 100.0, "sim_platform": "test"})
    b = _kernel_rows({"expert_wave": 90.0, "interleaved": 100.0, "expert_wave_local": 50.0,
                      "interleaved_local": 60.0, "grouped_mm": 40.0},
                     problem=MoeProblem(256, 128, 700, seed=3),
                     sim={"sim_wave(us)": 105.0, "sim_int(us)": 100.0, "sim_platform": "test"})
    assert a[0]["compute(TFLOPs)"] == pytest.approx(PROBLEM.flops / 120.0 / 1e6)
    path = save_records(tmp_path / "moe" / "moe-kernel.parquet", "kernel", pd.DataFrame(a + b),
                        {"config": {}, "provenance": {}})
    frame, meta = load_records(path, "kernel")
    assert len(frame) == 10 and meta["kind"] == "kernel"
    s = R.summarize(tmp_path)
    assert s["n_configs"] == 2
    assert s["geomean_speedup_interleaved"] == pytest.approx(math.sqrt(1.2 * 0.9))
    assert s["max_speedup_interleaved"] == pytest.approx(1.2)
    assert s["gemm_tflops_vs_grouped_mm"] == pytest.approx(math.sqrt(0.8 * 0.8))
    assert s["sign_agreement_with_sim"] == pytest.approx(0.5)  # config b: measured < 1, simulated > 1
    assert s["grouped_gemm_baseline"] == "torch._grouped_mm"


def test_resimulate_from_stored_medians():
    rows = _kernel_rows({"expert_wave": 120.0, "interleaved": 100.0})
    k = R.resimulate(pd.DataFrame(rows), load_platform("paper-b200"), "paper-b200")
    assert np.isfinite(k["sim_wave(us)"]).all() and np.isfinite(k["sim_int(us)"]).all()
    assert (k["sim_platform"] == "paper-b200").all()
    lay = dispatch_layout(PROBLEM)
    t = {"l1_us": 6.0, "l2_us": 3.0, "l1_epilogue_us": 0.5, "l2_epilogue_us": 1.0}
    want = R.simulate(lay, make_moe_schedule("expert_wave", lay.grid, 8), t, load_platform("paper-b200"))
    assert k["sim_wave(us)"].iloc[0] == pytest.approx(want)
    slow = R.scaled_b200(8, 1.0)  # 1 GB/s: the Combine dominates; completion-coupled epilogues wait for it
    coupled = R.simulate(lay, make_moe_schedule("expert_wave", lay.grid, 8), t, slow, coupled=True)
    assert coupled > R.simulate(lay, make_moe_schedule("expert_wave", lay.grid, 8), t, slow)


def test_two_programs_per_sm_replay_as_that_many_producers():
    # a schedule of 2 x SMs programs (hw/moe/bench.py BF16_SHORT_K) replays on a platform of SMs SMs: each
    # program is a producer with the measured per-tile medians, the drain the platform's
    lay = dispatch_layout(PROBLEM)
    t = {"l1_us": 6.0, "l2_us": 3.0, "l1_epilogue_us": 0.5, "l2_epilogue_us": 1.0}
    plat = R.scaled_b200(8, 5.0)
    sched = make_moe_schedule("expert_wave", lay.grid, 16)
    with pytest.raises(InputError):
        plat.check_producers(16)
    two = R.simulate(lay, sched, t, plat)
    assert math.isfinite(two) and two < R.simulate(lay, make_moe_schedule("expert_wave", lay.grid, 8), t, plat)


def test_summarize_without_records(tmp_path):
    with pytest.raises(InputError, match="moe-kernel"):
        R.summarize(tmp_path)


def test_cli_layout_and_results(tmp_path):
    out = subprocess.run([sys.executable, "-m", "xstage.cli", "moe", "layout", "--hidden", "2048", "--intermediate",
                          "512", "--tokens", "4096", "--routing", "skewed", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lay = json.loads(out.stdout)
    assert sum(lay["tokens_per_expert"]) == 4096 and lay["lead_rows"] == 17   # ceil(128 * 132 / 1024)
    assert lay["local_bytes"] + lay["remote_bytes"] == 4096 * 2048 * 2
    bad = subprocess.run([sys.executable, "-m", "xstage.cli", "moe", "layout", "--routing", "hot"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "routing" in bad.stderr
    rows = _kernel_rows({"expert_wave": 120.0, "interleaved": 100.0},
                        sim={"sim_wave(us)": 110.0, "sim_int(us)": 100.0, "sim_platform": "test"})
    save_records(tmp_path / "moe" / "moe-kernel.parquet", "kernel", pd.DataFrame(rows), {"config": {}})
    res = subprocess.run([sys.executable, "-m", "xstage.cli", "results", "moe", "--data", str(tmp_path), "--json"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["n_configs"] == 1 and s["sign_agreement_with_sim"] == 1.0


def test_latest_run_wins_for_a_repeated_configuration(tmp_path):
    old = _kernel_rows({"expert_wave": 200.0, "interleaved": 100.0})
    new = _kernel_rows({"expert_wave": 110.0, "interleaved": 100.0})
    save_records(tmp_path / "moe" / "a" / "moe-kernel.parquet", "kernel", pd.DataFrame(old),
                 {"provenance": {"date": "2026-11-29T12:40:00"}})
    save_records(tmp_path / "moe" / "b" / "moe-kernel.parquet", "kernel", pd.DataFrame(new),
                 {"provenance": {"date": "2026-11-29T13:20:00"}})
    s = R.summarize(tmp_path)
    assert s["n_configs"] == 1 and s["max_speedup_interleaved"] == pytest.approx(1.1)


def test_identical_schedules_have_no_winner(tmp_path):
    # one wave holds all 8 experts and D reaches the last row: the interleaved order IS expert-wave
    big = MoeProblem(2048, 512, 4096)
    rows_total = dispatch_layout(big).grid.rows
    assert R.schedules_identical(big, 132, rows_total - 1)
    assert not R.schedules_identical(big, 132, 2)
    same = _kernel_rows({"expert_wave": 100.0, "interleaved": 100.4}, problem=big,
                        sim={"sim_wave(us)": 100.0, "sim_int(us)": 100.0, "sim_platform": "test"})
    for r in same:
        r.update(lead_rows=rows_total - 1, num_sms=132)
    differ = _kernel_rows({"expert_wave": 120.0, "interleaved": 100.0},
                          sim={"sim_wave(us)": 110.0, "sim_int(us)": 100.0, "sim_platform": "test"})
    save_records(tmp_path / "moe" / "moe-kernel.parquet", "kernel", pd.DataFrame(same + differ), {"config": {}})
    s = R.summarize(tmp_path)
    assert s["n_configs"] == 2 and s["n_identical_schedules"] == 1
    assert s["sign_agreement_with_sim"] == 1.0       # over the one configuration with two different orders
    assert s["sign_agreement_with_sim_all"] == 0.5   # the tie (sim 1.0 vs measured 0.996) counts as a miss
    # a recorded column wins over the rebuild
    for r in same:
        r["schedules_identical"] = False
    for r in differ:
        r["schedules_identical"] = False
    save_records(tmp_path / "moe2" / "moe" / "moe-kernel.parquet", "kernel", pd.DataFrame(same + differ),
                 {"config": {}})
    assert R.summarize(tmp_path / "moe2")["n_identical_schedules"] == 0


def test_hw_tile_replay_and_label_parse():
    assert R.parse_label(PROBLEM.label()) == MoeProblem(256, 128, 600, routing="skewed", seed=2)
    with pytest.raises(InputError):
        R.parse_label("Qwen3.5/w8a8/skewed/M")
    lay = dispatch_layout(PROBLEM)
    s = make_moe_schedule("interleaved", lay.grid, 8, lead_rows=2)
    log, _ = _fake_log(s, lay)
    local = RB.tile_frame(lay, s.tiles, log, schedule="interleaved", remote=False).assign(config=PROBLEM.label())
    kernel = pd.DataFrame(_kernel_rows({"interleaved": 100.0}))
    for kern in (kernel, None):  # with the run's kernel record (lead D = 2), or from the label and the tiles alone
        sim = R.replay_hw_tiles(local, kern, load_platform("paper-b200"))
        assert set(sim["schedule"]) == {"expert_wave", "interleaved"} and set(sim["config"]) == {PROBLEM.label()}
        assert (sim["source"] == "sim").all()
        inter = sim[sim["schedule"] == "interleaved"]
        assert len(inter) == len(s.tiles)
        # the replay used the local tiles' medians: 6 us L1 and 3 us L2 mainloops
        ml = (inter["mainloop_end(us)"] - inter["mainloop_start(us)"]).groupby(inter["kind"].astype(str)).median()
        assert ml["L1"] == pytest.approx(6.0, abs=1e-3) and ml["L2"] == pytest.approx(3.0, abs=1e-3)


def test_worst_shape_and_baseline_keys(tmp_path):
    """The issue-17 keys: worst GEMM ratio per precision, and the baseline over the slower / faster schedule."""
    a = _kernel_rows({"expert_wave": 120.0, "interleaved": 100.0, "expert_wave_local": 80.0,
                      "interleaved_local": 70.0, "grouped_mm": 63.0, "baseline_total": 150.0})
    b = _kernel_rows({"expert_wave": 90.0, "interleaved": 100.0, "expert_wave_local": 50.0,
                      "interleaved_local": 60.0, "grouped_mm": 45.0, "baseline_total": 95.0},
                     problem=MoeProblem(256, 128, 700, seed=3))
    w = _kernel_rows({"expert_wave": 90.0, "interleaved": 80.0, "expert_wave_local": 50.0,
                      "interleaved_local": 40.0, "grouped_mm": 34.0, "baseline_total": 200.0},
                     problem=MoeProblem(256, 128, 700, seed=3, precision="w8a8"))
    save_records(tmp_path / "moe" / "moe-kernel.parquet", "kernel", pd.DataFrame(a + b + w),
                 {"config": {}, "provenance": {}})
    s = R.summarize(tmp_path)
    assert s["gemm_tflops_vs_grouped_mm"] == pytest.approx(math.sqrt(0.9 * 0.9))
    assert s["gemm_tflops_vs_grouped_mm_min"] == pytest.approx(0.9)
    assert s["gemm_tflops_vs_scaled_grouped_mm_min"] == pytest.approx(0.85)
    assert s["fused_vs_baseline_min"] == pytest.approx(0.95)          # config b: 95 us over its slower 100 us
    assert s["fused_best_vs_baseline_min"] == pytest.approx(95 / 90)


def test_group_rows_reach_the_replay():
    """Records that walked 4 rows side by side are re-simulated in that order (not Algorithm 1's row-major)."""
    plain = _kernel_rows({"expert_wave": 120.0, "interleaved": 100.0})
    grouped = [{**r, "group_rows": 4} for r in plain]
    plat = load_platform("paper-b200")
    a = R.resimulate(pd.DataFrame(plain), plat, "p")
    b = R.resimulate(pd.DataFrame(grouped), plat, "p")
    lay = dispatch_layout(PROBLEM)
    t = {"l1_us": 6.0, "l2_us": 3.0, "l1_epilogue_us": 0.5, "l2_epilogue_us": 1.0}
    want = R.simulate(lay, make_moe_schedule("interleaved", lay.grid, 8, lead_rows=2, group_rows=4), t, plat)
    assert b["sim_int(us)"].iloc[0] == pytest.approx(want)
    assert R.group_rows(pd.Series({"group_rows": 4})) == 4 and R.group_rows(pd.Series({"x": 1})) == 1
    assert not R.schedules_identical(PROBLEM, 8, 2, group_rows=4) or a["sim_int(us)"].iloc[0] > 0


def test_compare_replays_hardware_rows_without_a_stored_replay():
    # records written without sim_* columns (a label, not a catalog name): compare replays them on its
    # own platform from the rows' shape and measured medians, the same numbers as resimulate
    from xstage.compare.moe import compare_moe

    plat = load_platform("paper-b200")
    kernel = pd.DataFrame(_kernel_rows({"expert_wave": 120.0, "interleaved": 100.0}))
    out = compare_moe(kernel, plat)
    want = R.resimulate(kernel, plat, "paper-b200").iloc[0]
    assert len(out) == 1 and out["measured_speedup"].iloc[0] == pytest.approx(1.2)
    assert out["simulated_wave(us)"].iloc[0] == pytest.approx(want["sim_wave(us)"])
    assert out["simulated_speedup"].iloc[0] == pytest.approx(want["sim_wave(us)"] / want["sim_int(us)"])
    # the other platform gives other numbers: the replay is the comparison's, not a stored one
    other = compare_moe(kernel, load_platform("h200-pcie-host"))
    assert other["simulated_wave(us)"].iloc[0] != pytest.approx(want["sim_wave(us)"])


def test_another_gpus_run_of_the_same_configurations_keeps_its_own_rows(tmp_path):
    """An H100's run of configurations the H200 measured (session 23) does not replace the H200's rows as "the latest
    run" does within one platform; a summary takes one platform's rows, the H200's unless asked."""
    from xstage.paths import data_dir

    rows, meta = load_records(data_dir() / "moe/run-333d725-heldout2/moe-kernel.parquet", "kernel")
    save_records(tmp_path / "a" / "moe-kernel.parquet", "kernel", rows, meta)
    later = {**meta, "provenance": {**meta["provenance"], "date": "2099-01-01T00:00:00+00:00"}}
    save_records(tmp_path / "b" / "moe-kernel.parquet", "kernel", rows.assign(platform="h100-pcie-host"), later)
    both = R.load_kernel_records(tmp_path)
    assert both.groupby("platform").size().to_dict() == {"h100-pcie-host": len(rows), "h200-pcie-host": len(rows)}
    assert set(R.one_platform(both)["platform"]) == {"h200-pcie-host"}
    assert set(R.load_kernel_records(tmp_path, "h100-pcie-host")["platform"]) == {"h100-pcie-host"}
    only = both[both["platform"] == "h100-pcie-host"]
    assert R.one_platform(only) is only
    # within one platform the latest run still wins
    save_records(tmp_path / "c" / "moe-kernel.parquet", "kernel", rows.assign(**{"time(us)": 1.0}),
                 {**later, "provenance": {**later["provenance"], "date": "2100-01-01T00:00:00+00:00"}})
    again = R.load_kernel_records(tmp_path)
    assert (again.loc[again["platform"] == "h200-pcie-host", "time(us)"] == 1.0).all()


@pytest.mark.parametrize("run,n", [("run-333d725-heldout2", 16), ("run-98f3b5b-heldout3", 8)])
def test_a_folder_of_one_heldout_sweep_is_summarized_as_its_own_rows(run, n):
    """The bench prints ``summarize(--out)`` at its end; a held-out sweep's folder holds no main-sweep rows, and
    until session 23 that raised IndexError after the records were written (the H200 call of call23c)."""
    from xstage.paths import data_dir

    s = R.summarize(data_dir() / "moe" / run)
    assert s["n_configs"] == n and s["geomean_speedup_interleaved"] > 1
