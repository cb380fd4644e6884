"""Sweeps, advisor and the schedule CLI (small configurations only)."""

import json

import numpy as np
import pandas as pd
import pytest

from xstage.cli import main
from xstage.errors import InputError
from xstage.records import load_records
from xstage.sim.platform import load_platform
from xstage.sim.schedules import Schedule
from xstage.sim.sweep import run_fa_config, run_moe_config, summarize_moe, sweep

SMALL = ["DiT-MoE/w8a8/skewed/S", "DiT-MoE/w8a8/balanced/S"]


@pytest.fixture(scope="module")
def b200():
    return load_platform("paper-b200")


def test_moe_row(b200):
    row = run_moe_config("DiT-MoE/w8a8/skewed/S", b200)
    assert row["speedup"] == pytest.approx(row["wave_us"] / row["int_us"])
    assert row["lead_rows"] == max(1, row["D_knee"])
    # the wave schedule is drain-limited (Eq. 10 fails) and its spans sit above the interleaved floor
    assert not row["eq10_rate_ok_wave"]
    assert row["wave_span_median_us"] > row["int_span_median_us"]


def test_summary_keys():
    frame = pd.DataFrame({"config": list("abcd"), "routing": ["skewed", "skewed", "balanced", "balanced"],
                          "model": "m", "precision": "p", "setting": "s", "speedup": [1.0, 4.0, 1.0, 1.0]})
    s = summarize_moe(frame)
    assert s["n_configs"] == 4 and s["geomean_speedup"] == pytest.approx(np.sqrt(2))
    assert s["geomean_speedup_skewed"] == pytest.approx(2.0) and s["geomean_speedup_balanced"] == 1.0
    assert s["median_speedup"] == 1.0 and s["max_speedup"] == 4.0 and s["min_speedup"] == 1.0


def test_fa_row(b200):
    small = run_fa_config("fa4", 8192, b200)
    large = run_fa_config("fa4", 32768, b200)
    # X-Stage: residual stays at the last tile's issue; completion-coupled exposure grows with M
    assert small["E_res_us"] < 2.0 and large["E_res_us"] < 2.0
    assert large["E_cc_us"] > 3 * small["E_cc_us"] > 0
    assert small["M_ub_star"] == 1024
    assert large["G_Qloop_us"] - 1.0 == pytest.approx(4 * (small["G_Qloop_us"] - 1.0))


def test_cli_sweep_local(tmp_path, capsys):
    out = tmp_path / "s.parquet"
    rc = main(["sweep", "moe", "--jobs", "1", "--configs", *SMALL, "--out", str(out), "--json", "--no-progress"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    for key in ("n_configs", "geomean_speedup", "median_speedup", "max_speedup", "min_speedup",
                "geomean_speedup_skewed", "geomean_speedup_balanced"):
        assert key in summary
    frame, meta = load_records(out, "summary")
    assert len(frame) == 2 and meta["summary"]["n_configs"] == 2 and meta["platform_hash"]
    assert {"wave(us)", "int(us)", "wave_span_median(us)"} <= set(frame) and "wave_us" not in frame   # record spelling
    assert main(["sweep", "moe", "--jobs", "1", "--configs", SMALL[0], "--out", str(out), "--no-progress"]) == 2


def test_sweep_dask_local_cluster(b200):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as c:
        frame = sweep("moe", b200, scheduler=c.scheduler_address, configs=SMALL)
    local = sweep("moe", b200, jobs=1, configs=SMALL)
    assert frame["config"].tolist() == SMALL
    assert np.allclose(frame["speedup"], local["speedup"])


def test_sweep_worker_pool_keeps_the_configurations_order(b200):
    configs = SMALL + ["Qwen3.5/w8a8/skewed/M", "DiT-MoE/w8a8/skewed/S"]   # a repeat too: rows by position
    progress = []
    frame = sweep("moe", b200, jobs=2, configs=configs, progress=lambda done, n: progress.append((done, n)))
    local = sweep("moe", b200, jobs=1, configs=configs)
    assert frame["config"].tolist() == configs
    assert np.allclose(frame["speedup"], local["speedup"])
    assert progress == [(i, len(configs)) for i in range(1, len(configs) + 1)]


def test_cli_advise_json(capsys):
    rc = main(["advise", "--config", "DiT-MoE/w8a8/skewed/S", "--leads", "1,7", "--slots", "2", "--json"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    best = res["recommendation"]
    assert best["schedule"] in ("expert_wave", "interleaved")
    assert len(res["candidates"]) == 3
    assert min(c["adjusted_us"] for c in res["candidates"]) == pytest.approx(best["adjusted_us"])
    assert {"eq10_rate_ok_wave", "eq14_interleaving_sufficient", "D_knee"} <= set(res["design"])
    assert "Eq. 10" in res["reason"] and "D_knee" in res["reason"]


def test_cli_replay_and_export(tmp_path, capsys):
    tiles = tmp_path / "t.parquet"
    assert main(["replay", "moe", "--config", "DiT-MoE/w8a8/skewed/S", "--schedule", "expert_wave",
                 "--l2-us", "5.3", "--out", str(tiles), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    frame, _ = load_records(tiles, "tile")
    assert len(frame) == summary["tiles"] and summary["l2_us"] == 5.3
    npz = tmp_path / "s.npz"
    assert main(["schedule", "export", "--schedule", "interleaved", "--tokens-per-expert", "256,128",
                 "--hidden", "512", "--intermediate", "256", "--num-sms", "4", "--lead", "1", "--out", str(npz)]) == 0
    s = Schedule.load(npz)
    assert s.num_sms == 4 and len(s.tiles) == 3 * (4 + 4)   # 3 rows x (2*256/128 L1 + 512/128 L2)
    assert main(["schedule", "export", "--schedule", "fa_qloop", "--heads", "2", "--seq-len", "1024",
                 "--out", str(tmp_path / "fa.npz")]) == 0


@pytest.mark.parametrize("argv,needle", [
    (["replay", "moe", "--config", "Nope"], "model"),
    (["replay", "moe", "--config", "DiT-MoE", "--schedule", "zigzag"], "schedule"),
    (["replay", "moe", "--config", "DiT-MoE", "--lead", "-1"], "lead"),
    (["replay", "moe", "--config", "DiT-MoE", "--lead", "0"], "deadlocks"),
    (["replay", "moe", "--config", "DiT-MoE", "--num-sms", "200"], "num_sms"),
    (["schedule", "export", "--schedule", "interleaved", "--tokens-per-expert", "0,0", "--hidden", "512",
      "--intermediate", "256", "--out", "/tmp/never.npz"], "empty"),
    (["schedule", "export", "--schedule", "interleaved", "--tokens-per-expert", "10", "--hidden", "500",
      "--intermediate", "256", "--out", "/tmp/never.npz"], "block_n"),
    (["advise", "--config", "DiT-MoE/w8a8/skewed/S", "--leads", "0"], "lead"),
])
def test_cli_bad_input(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def test_sweep_bad_kind(b200):
    with pytest.raises(InputError, match="kind"):
        sweep("gemm", b200)


def test_locality_penalty():
    from xstage.sim.advisor import locality_penalty
    assert locality_penalty(50, 100) == 0.0
    assert locality_penalty(300, 100) == pytest.approx(0.10)          # 2 cache sizes over: 10 %, at the cap
    assert locality_penalty(150, 100) == pytest.approx(0.025)
    assert locality_penalty(1e6, 100, max_penalty=0.2) == 0.2


def test_table2_small_setting(b200):
    from xstage.sim.reproduce import table2
    t = table2(b200, setting="S").set_index("model")
    assert (t["pred_int_us"] == 0).all()                       # interleaving predicts no stall (Eq. 14)
    assert t.loc["DSv4-Pro", "pred_wave_us"] == 0              # the paper's negative control
    assert t.loc["Qwen3.5", "pred_wave_us"] > 0 and t.loc["Hy3", "pred_wave_us"] > 0
    assert (t["span_wave_us"] >= t["span_int_us"] - 1e-9).all()


def test_wave_imbalance_reaches_the_expert_wave_schedule(capsys, tmp_path):
    from xstage.cli import main
    from xstage.records import load_records
    name = "DiT-MoE/w8a8/balanced/M"    # 2 experts per wave at imbalance 16, 1 at 4
    rows = {}
    for imb in ("16", "4"):
        out = tmp_path / f"imb{imb}.csv"
        assert main(["sweep", "moe", "-p", "paper-b200", "--configs", name, "--jobs", "1", "--no-progress",
                     "--wave-imbalance", imb, "--out", str(out), "--json"]) == 0
        capsys.readouterr()
        frame, meta = load_records(out, "summary")
        rows[imb] = frame.iloc[0]
        assert meta["config"]["wave_imbalance"] == float(imb) and rows[imb]["wave_imbalance"] == float(imb)
    assert rows["4"]["wave_experts"] < rows["16"]["wave_experts"]        # smaller waves
    assert rows["4"]["int(us)"] == pytest.approx(rows["16"]["int(us)"])    # interleaved does not use waves
    for bad, field in (("0", "--wave-imbalance(='0')"), ("many", "--wave-imbalance(='many')")):
        code = main(["sweep", "moe", "-p", "paper-b200", "--configs", name, "--jobs", "1", "--no-progress",
                     "--wave-imbalance", bad, "--out", str(tmp_path / "x.csv")])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and field in err
    code = main(["sweep", "fa", "-p", "paper-b200", "--wave-imbalance", "4", "--out", str(tmp_path / "y.csv")])
    assert code == 2 and "--wave-imbalance" in capsys.readouterr().err
