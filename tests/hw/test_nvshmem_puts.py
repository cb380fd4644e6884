"""The NVSHMEM device-put issue path (``xstage.hw.microbench.puts``): the --issue selector and its one-line
refusals, the put plan and the put source against the store path's expected buffer (pure), the issue path in
the platform file; on a GPU with nvshmem4py and Numba-CUDA (marked ``gpu``) the put kernel at self-PE: every
destination word checked in every mode, a corrupted word caught, the store path's record columns.
benchmarks/gpu/nvshmem_puts.sh runs the gpu test and the calibrations."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from xstage.cli import main
from xstage.errors import InputError
from xstage.hw.common.targets import PeerLayout
from xstage.hw.microbench import puts
from xstage.hw.microbench.pattern import expected_buffer, last_burst_of_slot

QUICK = ["calibrate", "--target", "peer", "--self-peer", "--quick", "--no-copy"]


@pytest.mark.parametrize("issue, backend, target, must", [
    ("bogus", "nvshmem", "peer", "must be one of store, put-nbi, put"),
    ("put", "torch", "peer", "needs --target peer --backend nvshmem"),
    ("put-nbi", "nvshmem", "local", "needs --target peer --backend nvshmem"),
])
def test_issue_is_checked(issue, backend, target, must):
    with pytest.raises(InputError, match=must):
        puts.check_issue(issue, backend, target)
    assert puts.check_issue("store", "torch", "host") == "store"
    assert puts.check_issue("put", "nvshmem", "peer") == "put"


@pytest.mark.parametrize("argv, must", [
    (["--issue", "put"], "--issue(='put') needs --target peer --backend nvshmem"),
    (["--issue", "gets"], "--issue(='gets') must be one of"),
    (["--issue", "put-nbi", "--backend", "nvshmem", "--sim", "paper-b200"], "needs the GPU"),
])
def test_cli_refuses_with_one_line(tmp_path, capsys, argv, must):
    assert main([*QUICK, *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and must in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_put_without_nvshmem4py_refuses_before_any_gpu_work(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "nvshmem", None)
    monkeypatch.setitem(sys.modules, "nvshmem.core", None)
    assert main([*QUICK, "--backend", "nvshmem", "--issue", "put", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install nvshmem4py-cu13" in err
    assert not (tmp_path / "o").exists()


def test_missing_numba_bindings_refuse_with_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvshmem.bindings.device.numba", None)
    with pytest.raises(InputError, match="needs Numba-CUDA") as err:
        puts.device_bindings()
    assert "\n" not in str(err.value)


def test_put_module_imports_without_gpu_libraries():
    code = ("import sys\nfor m in ('torch', 'cupy', 'numba', 'nvshmem'):\n    sys.modules[m] = None\n"
            "import xstage.hw.microbench.puts, xstage.hw.microbench.put_kernel, xstage.hw.calib.runners\nprint('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_plan_next_puts_every_producer_to_the_peer_at_its_row():
    info = {"local_base": 0x7000_0000, "peer_rank": 1, "rank": 0, "world_size": 2}
    plan = puts.put_plan(info, [{"dest": None, "ptr": 0x9000_0000}], 5, 0x9000_0000)
    assert plan["dst_local"] == [0x7000_0000] and plan["pe"] == [1] and plan["rows"] == 5
    assert plan["dst_of"].tolist() == [0] * 5 and plan["row_of"].tolist() == list(range(5))
    assert plan["tags"].tolist() == list(range(5))
    with pytest.raises(InputError, match="must start at the target pointer"):
        puts.put_plan(info, [{"dest": None, "ptr": 0x9000_0010}], 5, 0x9000_0000)


def test_plan_all_maps_each_region_to_the_local_symmetric_address_and_pe():
    rank, world, K, nbytes = 1, 4, 7, 3 * 2**20
    lay = PeerLayout(rank, world, K, "all")
    peer = {d: 0x1_0000_0000 * (d + 1) for d in range(world)}      # the peers' mapped base addresses
    regions = [{"dest": d, "ptr": peer[d] + lay.region_offset(d, nbytes)} for d in lay.dests]
    info = {"local_base": 0x5000_0000, "peer_rank": 2, "rank": rank, "world_size": world}
    plan = puts.put_plan(info, regions, K, peer[2], [peer[d] for d in range(world)])
    assert plan["pe"] == list(lay.dests) and rank not in plan["pe"]
    assert plan["dst_local"] == [0x5000_0000 + lay.region_offset(d, nbytes) for d in lay.dests]
    assert [plan["pe"][i] for i in plan["dst_of"]] == lay.dest_of.tolist()
    assert plan["row_of"].tolist() == lay.row_of.tolist() and plan["rows"] == lay.rows
    assert plan["tags"].tolist() == [rank << 16 | p for p in range(K)]


@pytest.mark.parametrize("K, W, slots, n", [(3, 5, 4, 6), (2, 1, 2, 2), (4, 3, 3, 7)])
def test_source_holds_what_the_destination_check_expects(K, W, slots, n):
    """Slot s of the destination ends up with the source of the last burst that wrote it; that must be the
    store path's expected buffer, so the put path is checked by the same device check."""
    src = puts.source_words(K, W, n)
    want = expected_buffer(K, W, slots, n)
    for s in range(slots):
        assert np.array_equal(src[last_burst_of_slot(s, slots, n)], want[s])
    tags = np.array([9 << 16 | p for p in range(K)], dtype=np.uint32)
    assert np.array_equal(puts.source_words(K, W, n, tags)[n - 1], expected_buffer(K, W, 1, n, tags)[0])


def test_platform_file_says_which_issue_path(tmp_path, monkeypatch):
    """A peer run on a runner that reports the put issue path: platform name and notes say so."""
    from xstage.hw.calib import calibrate
    from xstage.hw.calib.runners import SimRunner
    from xstage.sim.platform import load_platform

    class PutSim(SimRunner):
        def describe(self):
            return {**super().describe(), "runner": "gpu", "gpu_name": "NVIDIA H200", "issue": "put-nbi",
                    "target_info": {"backend": "nvshmem", "issue": puts.DESCRIBE["put-nbi"], "world_size": 1}}

    monkeypatch.setattr(calibrate, "_link_info", lambda gpu: {"pcie_limit_GBps": None, "pcie_gen5_x16_GBps": 63.0})
    cfg = calibrate.CalibConfig(target="peer", producers=(16, 132), sizes=(8192, 65536), gap_configs=((132, 32768),),
                                gap_fractions=(0.5, 1.0), iso_producers=(132,), iso_sizes=(8192, 65536, 262144),
                                bursts=8, steady_bytes=2**20, max_bursts=16, iso_bursts=3, trials=1,
                                copy_engine=False, free_running=False, heldout_fraction=0.0)
    calibrate.run_calibration(cfg, PutSim(load_platform("paper-b200")), tmp_path / "o", progress=False,
                              provenance_block={"git_commit": "test"})
    plat = json.loads((tmp_path / "o" / "platform.json").read_text())
    assert plat["name"] == "h200-peer-put-nbi"
    assert plat["notes"]["issue_path"].startswith("put-nbi: nvshmemx_uint32_put_nbi_block")
    assert "symmetric memory from nvshmem" in plat["notes"]["issue_path"]


# --- on the GPU -------------------------------------------------------------------------------------------
GPU_RUN = r"""
import json
from xstage.hw.common import nvshmem
from xstage.hw.common.targets import open_target
from xstage.hw.microbench.pattern import MicrobenchError
from xstage.hw.microbench.puts import PutMicrobench
from xstage.hw.microbench.runner import Microbench
from xstage.hw.microbench.spec import BurstSpec
t = open_target("peer", 64 << 20, self_peer=True, backend="nvshmem")
out = {}
for issue in ("put-nbi", "put"):
    mb = PutMicrobench(t, issue=issue)
    for mode in ("periodic", "isolated", "free", "aligned"):
        f, info = mb.run(BurstSpec(8, 16384, 1.0, mode=mode, bursts=8, trials=1))
        out[f"{issue}/{mode}"] = {"verified": info["verified_words"], "rows": len(f), "cols": list(f.columns),
                                  "issue_us": float(f["issue(us)"].median())}
    spec = BurstSpec(4, 4096, bursts=4, trials=1)
    mb.run(spec)
    mb.corrupt_word(spec)
    try:
        mb.verify(spec)
        out[f"{issue}/caught"] = False
    except MicrobenchError:
        out[f"{issue}/caught"] = True
    out["placement"] = mb.launch.placement
f, _ = Microbench(t).run(BurstSpec(8, 16384, 1.0, bursts=8, trials=1))
out["store_cols"] = list(f.columns)
t.close()
print("RESULT" + json.dumps(out))
"""


def _put_bindings():
    try:
        puts.device_bindings()
    except InputError as err:
        pytest.skip(str(err))


@pytest.mark.gpu
def test_put_kernel_at_self_pe_on_gpu(nvshmem_gpu):
    _put_bindings()
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR")}
    proc = subprocess.run([sys.executable, "-c", GPU_RUN], capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads([x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1][len("RESULT"):])
    for issue in ("put-nbi", "put"):
        for mode in ("periodic", "isolated", "free", "aligned"):
            r = out[f"{issue}/{mode}"]
            assert r["verified"] == 2 * 8 * 8 * 16384 // 16        # warm-up + 1 trial, every 16-byte word
            assert r["rows"] == 8 * 8 and r["cols"] == out["store_cols"] and r["issue_us"] > 0
        assert out[f"{issue}/caught"]


def _points(rows):
    import pandas as pd
    cols = ("phase", "producers", "bytes_per_producer", "T_iss(us)", "period(us)", "fence(us)", "T_iss_producer(us)")
    frame = pd.DataFrame([dict(zip(cols, r)) for r in rows])
    return frame.assign(**{"volume(bytes)": frame["producers"] * frame["bytes_per_producer"]})


def test_issue_path_figures_are_read_off_the_points():
    K32, K64 = 32 * 1024, 64 * 1024
    pts = _points([("rate", 132, K64, 2.0, 3.0, float("nan"), 1.9), ("rate", 16, K64, 1.0, 2.5, float("nan"), 1.0),
                   ("plateau", 132, K32, 1.5, 9.0, float("nan"), 1.4), ("plateau", 16, K32, 0.7, 9.0, float("nan"), 0.6),
                   ("free-rate", 132, K64, 1.6, 1.8, float("nan"), 1.5),
                   ("isolated", 132, K32, 1.0, 13.0, 2.5, 0.8), ("isolated", 132, K64, 2.0, 14.0, 3.0, 1.6)])
    fig = puts.issue_path_figures(pts)
    assert fig["K"] == 132 and fig["T_iss_plateau_us_32KiB"] == 1.5
    assert fig["T_iss_isolated_us"] == {"32": 1.0, "64": 2.0} and fig["tail_after_issue_us"] == {"32": 1.5, "64": 1.0}
    assert fig["periodic_rate_GBps_max"] == pytest.approx(132 * K64 / 3.0 / 1e3)
    assert fig["free_rate_GBps_max"] == pytest.approx(132 * K64 / 1.8 / 1e3)
    assert fig["producer_issue_GBps"] == pytest.approx(K32 / 0.8 / 1e3)       # median of 40.96 and 40.96
    assert fig["zero_gap_overhead_us"] == pytest.approx(1.25)                 # median of 1.0 and 1.5
    cmp = puts.compare_issue_paths({"store": fig, "put": {**fig, "T_iss_plateau_us_32KiB": 4.5}})
    assert cmp["ratio_to_store"]["put"]["T_iss_plateau_us_32KiB"] == pytest.approx(3.0)
    assert "T_iss_isolated_us" not in cmp["ratio_to_store"]["put"]


def test_committed_comparison_is_what_the_committed_points_give():
    from pathlib import Path

    from xstage.records import load_records
    base = Path(__file__).resolve().parents[2] / "data" / "nvshmem-w1" / "issue-paths"
    if not (base / "comparison.json").is_file():
        pytest.skip("no committed issue-path records in this checkout")
    saved = json.loads((base / "comparison.json").read_text())
    for issue, fig in saved["figures"].items():
        points, meta = load_records(base / issue / "points.parquet", "point")
        assert meta["runner"]["issue"] == issue and meta["runner"]["target_info"]["backend"] == "nvshmem"
        again = json.loads(json.dumps(puts.issue_path_figures(points)))
        assert again.keys() == fig.keys()
        for key, value in fig.items():
            assert again[key] == pytest.approx(value), (issue, key)
