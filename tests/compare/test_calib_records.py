"""Calibration output files: round trip, re-fit, `xstage results calibration`, bad files, refusals."""

import json
import shutil

import pandas as pd
import pytest

from xstage.cli import main
from xstage.errors import InputError
from xstage.compare.calibration_records import summarize_results
from xstage.hw.calib import calibrate
from xstage.sim.calib_runner import SimRunner
from xstage.hw.microbench.runner import BurstSpec, check_pattern, expected_buffer, pattern_words, tick_from_reads
from xstage.records import load_records
from xstage.sim.platform import Platform
from xstage.units import KiB, MiB

TRUTH = Platform(name="synthetic-host", sm_count=132, drain_rate_GBps=50.0, t_fixed_us=1.5,
                 producer_issue_GBps=20.0, injection_GBps=None, target="host", capacity_points=((132, 2 * MiB),))
TINY = calibrate.CalibConfig(target="host", name="tiny-host", producers=(16, 132), sizes=(8 * KiB, 16 * KiB, 64 * KiB),
                             gap_configs=((132, 16 * KiB),), gap_fractions=(0.5, 1.5), iso_producers=(132,),
                             iso_sizes=tuple(k * KiB for k in (4, 8, 32, 64, 128)), bursts=8,
                             steady_bytes=4 * MiB, max_bursts=64, iso_bursts=3, trials=1, keep_producers=3,
                             copy_engine=False)


@pytest.fixture(scope="module")
def outdir(tmp_path_factory):
    out = tmp_path_factory.mktemp("calib") / "tiny-host"
    summary = calibrate.run_calibration(TINY, SimRunner(TRUTH), out, progress=False,
                                        provenance_block={"date": "test", "gpu": {"pcie_gen": "5", "pcie_width": "16"}})
    return out, summary


def test_files_round_trip(outdir):
    out, summary = outdir
    assert sorted(p.name for p in out.iterdir()) == sorted(f for f in calibrate.FILES
                                                           if f not in ("copy.parquet", "points-runs.parquet"))
    bursts, meta = load_records(out / "bursts.parquet", "burst")
    assert meta["config"]["name"] == "tiny-host" and meta["runner"]["runner"] == "sim"
    assert meta["link"]["pcie_limit_GBps"] == pytest.approx(63.015, rel=1e-4)
    assert set(bursts["producer"][bursts["producers"] == 132]) == {0, 66, 131}      # keep_producers=3
    assert (bursts["platform"] == "tiny-host").all() and (bursts["source"] == "sim").all()
    points, _ = load_records(out / "points.parquet", "point")
    again = pd.read_parquet(out / "points.parquet")
    pd.testing.assert_frame_equal(points, again)
    plat = Platform.load(out / "platform.json")
    assert plat.name == "tiny-host" and abs(plat.drain_rate_GBps - 50.0) < 0.5
    assert "model_check" in plat.notes and "provenance" in plat.notes
    assert json.loads((out / "summary.json").read_text())["R_GBps"] == pytest.approx(summary["R_GBps"])


def test_refuses_to_overwrite_and_refit_reproduces(outdir, tmp_path):
    out, summary = outdir
    with pytest.raises(InputError, match="already holds"):
        calibrate.run_calibration(TINY, SimRunner(TRUTH), out, progress=False, provenance_block={})
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    again = calibrate.refit(copy, overwrite=True)
    assert again["R_GBps"] == pytest.approx(summary["R_GBps"], rel=1e-9)
    assert Platform.load(copy / "platform.json").capacity_points == Platform.load(out / "platform.json").capacity_points


def test_results_calibration_summary(outdir, tmp_path, capsys):
    out, summary = outdir
    data = tmp_path / "data"
    shutil.copytree(out, data / "calibration" / "tiny-host")
    got = summarize_results(data, platform="tiny-host")
    for key in ("R_GBps", "T_iss0_us_at_32KiB", "Q_MiB", "median_rel_err_T_iss", "p90_rel_err_T_iss", "n_points"):
        assert key in got
    assert got["Q_MiB"] == pytest.approx(2.0, rel=0.02) and got["R_GBps"] == pytest.approx(50.0, rel=0.02)
    assert summarize_results(data) == [got]
    with pytest.raises(InputError, match="no calibration records"):
        summarize_results(data, platform="nope")
    assert main(["results", "calibration", "--data", str(data), "--platform", "tiny-host", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_points"] == got["n_points"]


def test_truncated_and_malformed_records_are_rejected(outdir, tmp_path):
    out, _ = outdir
    data = tmp_path / "data" / "calibration" / "bad"
    shutil.copytree(out, data)
    blob = (data / "points.parquet").read_bytes()
    (data / "points.parquet").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(InputError, match="not a readable record file"):
        summarize_results(tmp_path / "data", platform="bad")
    frame, meta = load_records(out / "bursts.parquet", "burst")
    frame.drop(columns=["issue(us)"]).to_parquet(tmp_path / "nometa.parquet")
    with pytest.raises(InputError, match="no xstage metadata"):
        load_records(tmp_path / "nometa.parquet", "burst")
    from xstage.records import save_records
    with pytest.raises(InputError, match="missing"):
        save_records(tmp_path / "x.parquet", "burst", frame.drop(columns=["issue(us)"]), meta)
    with pytest.raises(InputError, match="must be 'burst'"):
        load_records(out / "points.parquet", "burst")
    (data / "platform.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        summarize_results(tmp_path / "data", platform="bad")


def test_cli_refuses_missing_gpu_and_lone_peer(monkeypatch, capsys, tmp_path):
    from xstage.hw.common import targets
    monkeypatch.setattr(targets, "gpu_count", lambda: 0)
    assert main(["calibrate", "--target", "host", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "xstage: error: target(='host') needs a CUDA GPU; none found"
    monkeypatch.setattr(targets, "gpu_count", lambda: 1)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(InputError, match=r"needs >= 2 GPUs in this node \(found 1\)"):
        targets.check_target("peer")
    targets.check_target("peer", self_peer=True)  # world size 1 is allowed on request
    assert main(["calibrate", "--out", str(tmp_path)]) == 2
    assert "--target" in capsys.readouterr().err
    assert main(["calibrate", "--target", "host", "--out", str(tmp_path), "--sizes", "1000"]) == 2


def test_launcher_env_and_torchrun_command():
    from xstage.hw.common import targets
    env = targets.apply_launch_env({})
    assert env == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    cmd = targets.torchrun_command(2, ["-m", "xstage.cli", "calibrate", "--target", "peer"])
    assert "--nproc-per-node=2" in cmd and cmd[-1] == "peer"
    assert [targets.peer_rank(r, 4) for r in range(4)] == [1, 2, 3, 0] and targets.peer_rank(0, 1) == 0
    with pytest.raises(InputError):
        targets.torchrun_command(0, [])


def test_pattern_is_pinned_and_catches_misplaced_words():
    w = pattern_words(1, 2, 3)
    h = (0x9E3779B9 ^ 0x85EBCA6B ^ (2 * 0xC2B2AE35 % 2**32) ^ (3 * 0x27D4EB2F % 2**32)) & 0xFFFFFFFF
    assert w.tolist() == [1, 2, 3, h]
    buf = expected_buffer(3, 4, 2, 5)            # slot 0 last written by burst 4, slot 1 by burst 3
    assert buf[0, 2, 1].tolist() == pattern_words(2, 4, 1).tolist()
    assert buf[1, 0, 0, 1] == 3
    check_pattern(buf, 3, 4, 2, 5)
    swapped = buf.copy()
    swapped[0, 1], swapped[0, 2] = buf[0, 2], buf[0, 1]   # two producers' words exchanged
    with pytest.raises(Exception, match="8 of 24"):
        check_pattern(swapped, 3, 4, 2, 5)
    assert expected_buffer(2, 2, 4, 2)[2:].sum() == 0   # slots no burst reached stay zero


def test_tick_from_reads_and_spec_validation():
    coarse = tick_from_reads(([0] * 30 + [1000] * 30 + [2000] * 30))
    assert coarse["tick_ns"] == 1000.0 and coarse["resolved"] and coarse["distinct_deltas_ns"] == {1000: 2}
    fine = tick_from_reads(list(range(0, 3200, 32)))
    assert fine["tick_ns"] == 32.0 and not fine["resolved"]
    for bad in (dict(bytes_per_producer=100), dict(mode="burst"), dict(gap_kind="sleep"), dict(threads=48),
                dict(bursts=1), dict(gap_us=-1.0)):
        with pytest.raises(InputError):
            BurstSpec(**{"producers": 4, "bytes_per_producer": 1024, **bad})
