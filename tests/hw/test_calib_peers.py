"""The peer target's two patterns: one sender -> the next rank, and all-to-all (no GPU needed).

The layout (which producer stores where) is pure and tested directly; the microbenchmark's host side
runs on the numpy fake of CuPy from test_calib_fakegpu.py, extended with the all-to-all kernels, with
W ranks simulated in one process over W fake symmetric buffers.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xstage.cli import main
from xstage.errors import InputError
from xstage.hw.calib import calibrate
from xstage.hw.common import targets
from xstage.cli import bench_microbench
from xstage.hw.microbench import runner as mb
from xstage.hw.common.targets import NO_PRODUCER, PeerLayout, TargetBuffer


def _load_fake():
    spec = importlib.util.spec_from_file_location("calib_fakegpu", Path(__file__).with_name("test_calib_fakegpu.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fake = _load_fake()


# --- the layout ------------------------------------------------------------------------------------

def test_all_to_all_assignment_pinned():
    lay = PeerLayout(rank=1, world=4, producers=7)
    assert lay.dest_of.tolist() == [2, 3, 0, 2, 3, 0, 2]          # p -> (1 + 1 + p mod 3) mod 4
    assert lay.row_of.tolist() == [0, 0, 0, 1, 1, 1, 2] and lay.rows == 3
    assert lay.dests == (2, 3, 0) and lay.regions == 3
    assert [lay.region_index(d) for d in (2, 3, 0)] == [2, 1, 0]  # (s - d - 1) mod W
    assert lay.tags(2).tolist() == [1 << 16 | 0, 1 << 16 | 3, 1 << 16 | 6]
    assert lay.tags(3).tolist() == [1 << 16 | 1, 1 << 16 | 4, NO_PRODUCER]
    assert lay.region_bytes(1000) == 320 and lay.region_offset(3, 1000) == 320


def test_next_pattern_and_small_worlds():
    nxt = PeerLayout(rank=2, world=4, producers=5, pattern="next")
    assert nxt.dest_of.tolist() == [3] * 5 and nxt.row_of.tolist() == list(range(5)) and nxt.rows == 5
    assert nxt.regions == 1 and nxt.region_offset(3, 4096) == 0 and nxt.tags(3).tolist() == list(range(5))
    solo = PeerLayout(rank=0, world=1, producers=6)                # --self-peer: every producer -> own buffer
    assert solo.dests == (0,) and solo.rows == 6 and solo.region_offset(0, 4096) == 0
    assert solo.tags(0).tolist() == list(range(6))                 # rank 0: tag = p
    for r in range(2):                                             # W = 2: "all" sends where "next" does
        a, n = PeerLayout(r, 2, 9), PeerLayout(r, 2, 9, "next")
        assert a.dest_of.tolist() == n.dest_of.tolist() and a.row_of.tolist() == n.row_of.tolist()
        assert a.region_offset(1 - r, 4096) == 0 and a.regions == 1
    with pytest.raises(InputError, match="rank"):
        PeerLayout(rank=4, world=4, producers=3)
    with pytest.raises(InputError, match="pattern"):
        PeerLayout(rank=0, world=4, producers=3, pattern="ring")


@pytest.mark.parametrize("world", [2, 3, 4, 8])
@pytest.mark.parametrize("producers", [1, 5, 7, 16, 33, 66, 132])
def test_every_peer_gets_producers_balanced_never_self(world, producers):
    received = np.zeros(world, dtype=int)
    for rank in range(world):
        lay = PeerLayout(rank, world, producers)
        dest = lay.dest_of
        assert (dest != rank).all()
        counts = np.bincount(dest, minlength=world)
        others = np.delete(counts, rank)
        assert counts[rank] == 0 and others.sum() == producers
        assert others.max() - others.min() <= 1                    # balanced within one producer
        if producers >= world - 1:
            assert (others > 0).all() and len(lay.dests) == world - 1
        assert lay.rows == others.max()                            # a region holds the busiest destination
        received += counts
    assert (received == producers).all()                           # every rank receives K producers' stores
    tags = np.concatenate([PeerLayout(r, world, producers).tags(d) for r in range(world) for d in range(world)])
    tags = tags[tags != NO_PRODUCER]
    assert len(tags) == world * producers == len(set(tags.tolist()))   # a word names its sender and producer


@settings(max_examples=60, deadline=None)
@given(world=st.integers(1, 8), producers=st.integers(1, 132), words=st.integers(1, 64),
       slots=st.integers(1, 4), extra=st.integers(0, 4096))
def test_regions_are_disjoint_and_inside_the_buffer(world, producers, words, slots, extra):
    """Every store of every sender lands in its own region: no two (sender, producer, slot) slices of one
    destination buffer overlap, and all lie inside the buffer."""
    B = 16 * words
    rows = PeerLayout(0, world, producers).rows
    regions = max(world - 1, 1)
    nbytes = regions * slots * rows * B + extra                   # room for `slots` copies per region
    spans = {d: [] for d in range(world)}
    for s in range(world):
        lay = PeerLayout(s, world, producers)
        assert lay.region_bytes(nbytes) >= slots * rows * B
        for p, (d, row) in enumerate(zip(lay.dest_of.tolist(), lay.row_of.tolist())):
            for slot in range(slots):
                start = lay.region_offset(d, nbytes) + (slot * lay.rows + row) * B
                spans[d].append((start, start + B))
    for d, sp in spans.items():
        sp = np.array(sorted(sp))
        assert sp[0, 0] >= 0 and sp[-1, 1] <= nbytes
        assert (sp[1:, 0] >= sp[:-1, 1]).all(), f"overlap in rank {d}'s buffer"
    assert sum(len(v) for v in spans.values()) == world * producers * slots


def test_pattern_checks():
    assert targets.check_peer_pattern("all", "peer") == "all"
    assert targets.check_peer_pattern("next", "host") == "next"
    with pytest.raises(InputError, match="must be one of next, all"):
        targets.check_peer_pattern("ring", "peer")
    with pytest.raises(InputError, match="needs --target peer"):
        targets.check_peer_pattern("all", "local")
    with pytest.raises(InputError, match="needs --target peer"):
        calibrate.CalibConfig(target="host", peer_pattern="all")
    assert calibrate.default_name("peer", "NVIDIA H200", "all") == "h200-peer-a2a"
    assert calibrate.default_name("peer", "NVIDIA H200") == "h200-peer"


def test_default_name_takes_the_model_word_of_the_gpu_name():
    assert calibrate.default_name("host", "NVIDIA H100 80GB HBM3") == "h100-pcie-host"
    assert calibrate.default_name("local", "NVIDIA H100 PCIe") == "h100-local"
    assert calibrate.default_name("host", "NVIDIA B200") == "b200-pcie-host"
    assert calibrate.default_name("host", "NVIDIA GeForce RTX 4090") == "4090-pcie-host"
    assert calibrate.default_name("host", "") == "gpu-pcie-host"


# --- the microbenchmark on a fake GPU, W ranks in one process -----------------------------------

def _words(args):
    return [a.ptr if isinstance(a, fake.FakeArray) else int(a) for a in args]


def _burst_multi(grid, block, args, shared_mem=0):
    (table, dst_of, row_of, rows, tag_base, W, slots, n, mode, gap_kind, gap_param, settle, timeout, counter,
     rec, sm_of, sink, err) = _words(args)
    K = grid[0]
    assert shared_mem > 0
    tab = fake._view(table, np.uint64)
    d_of, r_of = fake._view(dst_of, np.uint32)[:K], fake._view(row_of, np.uint32)[:K]
    r = fake._view(rec, np.uint64)[: K * n * mb.NREC].reshape(K, n, mb.NREC)
    fake._view(sm_of, np.uint32)[:K] = np.arange(K)
    for p in range(K):
        for b in range(n):   # the address arithmetic of burst_kernel_multi / run_bursts
            addr = int(tab[d_of[p]]) + ((b % slots) * rows + int(r_of[p])) * W * 16
            fake._view(addr, np.uint32)[: 4 * W] = mb.pattern_words(tag_base | p, b, np.arange(W)).ravel()
            t0 = 1_000_000 + b * (fake.Behaviour.issue_ns + 500)
            r[p, b] = [t0, t0 + fake.Behaviour.issue_ns, 2 * t0, 2 * (t0 + fake.Behaviour.issue_ns),
                       t0 + 2 * fake.Behaviour.issue_ns if mode == 1 else 0, t0 + fake.Behaviour.issue_ns + 500]
    if fake.Behaviour.corrupt:
        fake._view(int(tab[0]) + 16, np.uint32)[0] ^= 8
    fake._view(err, np.int32)[0] = fake.Behaviour.err


def _verify_rows(grid, block, args, shared_mem=0):
    dst, tags, W, rows, slots, n, out = _words(args)
    got = fake._view(dst, np.uint32)[: slots * rows * W * 4].reshape(-1, 4)
    want = mb.expected_buffer(rows, W, slots, n, tags=fake._view(tags, np.uint32)[:rows]).reshape(-1, 4)
    bad = np.flatnonzero((got != want).any(axis=1))
    o = fake._view(out, np.uint64)
    o[0] = bad.size
    if bad.size:
        o[1] = bad[0]


def _flip(grid, block, args, shared_mem=0):
    ptr, mask = _words(args)
    fake._view(ptr, np.uint32)[0] ^= mask


class PeerModule(fake.FakeModule):
    def __init__(self, code, options=()):
        super().__init__(code, options)
        for name, fn in (("burst_kernel_multi", _burst_multi), ("verify_rows", _verify_rows), ("flip_bits", _flip)):
            assert re.search(rf"__global__ void (__launch_bounds__\(\d+\)\s+)?{name}\(", code), name
            self.kernels[name] = fake.FakeKernel(fn)


@pytest.fixture
def fake_gpu(monkeypatch):
    cp = fake._make_cupy()
    cp.RawModule = PeerModule
    monkeypatch.setitem(sys.modules, "cupy", cp)
    for k, v in {"corrupt": False, "err": 0, "same_sm": False}.items():
        monkeypatch.setattr(fake.Behaviour, k, v)
    yield cp
    fake._MEM.clear()


def _symmetric(world, nbytes, pattern="all"):
    """One fake symmetric buffer per rank; a TargetBuffer per rank as peer_buffer builds it."""
    bufs = [fake.FakeArray(nbytes, np.uint8) for _ in range(world)]
    syncs = []
    views = []
    for r in range(world):
        info = {"rank": r, "world_size": world, "peer_rank": (r + 1) % world, "peer_pattern": pattern}
        views.append(TargetBuffer("peer", bufs[(r + 1) % world].ptr, nbytes, info=info,
                                  peer_ptrs=tuple(b.ptr for b in bufs) if pattern == "all" else (),
                                  sync=(lambda r=r: syncs.append(r)) if world > 1 and pattern == "all" else None))
    return bufs, views, syncs


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_all_to_all_runs_write_only_their_regions(fake_gpu, world):
    nbytes = 96 * 1024
    bufs, views, syncs = _symmetric(world, nbytes)
    spec = mb.BurstSpec(7, 512, 1.0, bursts=6, trials=2, warmup=1)
    slots = None
    for view in views:                                  # every rank's sweep, one after another
        bench = mb.Microbench(view, ring_bytes=8 * 1024)
        frame, info = bench.run(spec)
        slots = info["slots"]
        assert info["peer_pattern"] == "all" and len(frame) == 7 * 6 * 2
        assert info["destinations"] == list(PeerLayout(view.info["rank"], world, 7).dests)
        assert mb.summarize_run(frame)["T_iss(us)"] == pytest.approx(0.9)
    assert slots == 4                                   # ring 8 KiB / V 3.5 KiB -> 3 copies, at least 4
    assert syncs == ([r for r in range(world) for _ in range(3)] if world > 1 else [])   # before every trial
    W = spec.words_per_producer
    for d, buf in enumerate(bufs):                      # receiver side: the whole buffer, byte for byte
        want = np.zeros(nbytes // 4, dtype=np.uint32)
        for s in range(world):
            lay = PeerLayout(s, world, 7)
            if d not in lay.dests:
                continue
            off = lay.region_offset(d, nbytes) // 4
            region = mb.expected_buffer(lay.rows, W, slots, spec.bursts, tags=lay.tags(d)).ravel()
            assert not want[off: off + region.size].any()          # no other sender wrote here
            want[off: off + region.size] = region
        np.testing.assert_array_equal(buf.a.view(np.uint32), want)


def test_slots_follow_the_region(fake_gpu):
    _, views, _ = _symmetric(8, 7 * 64 * 1024)          # 7 regions of 64 KiB
    bench = mb.Microbench(views[0], ring_bytes=1 << 20)
    assert bench.slots_for(mb.BurstSpec(14, 4096, bursts=100)) == 8     # 2 rows x 4 KiB per copy
    with pytest.raises(InputError, match="target buffer region"):
        bench.slots_for(mb.BurstSpec(132, 65536, bursts=4))              # 19 rows x 64 KiB > 64 KiB


def test_lost_store_in_a_peer_region_is_caught(fake_gpu):
    fake.Behaviour.corrupt = True
    _, views, _ = _symmetric(4, 64 * 1024)
    with pytest.raises(mb.MicrobenchError, match=r"pattern check failed.*region of rank 1's buffer"):
        mb.Microbench(views[0]).run(mb.BurstSpec(6, 512, bursts=3, trials=1))


def test_a_store_in_another_senders_region_is_caught(fake_gpu):
    """Sender 2's slice copied into sender 1's region of rank 0's buffer fails sender 1's check only."""
    bufs, views, _ = _symmetric(4, 64 * 1024)
    spec = mb.BurstSpec(6, 512, bursts=3, trials=1, warmup=0)
    benches = [mb.Microbench(v) for v in views]
    for b in benches:
        b.run(spec)
    l1, l2 = PeerLayout(1, 4, 6), PeerLayout(2, 4, 6)
    a, b = l1.region_offset(0, 64 * 1024), l2.region_offset(0, 64 * 1024)
    raw = bufs[0].a
    raw[a: a + 512] = raw[b: b + 512]                   # same row, burst and offset; other sender
    benches[2].verify(spec)
    with pytest.raises(mb.MicrobenchError, match="rank 0's buffer"):
        benches[1].verify(spec)


@pytest.mark.parametrize("world", [1, 4])
def test_selftest_all_pattern_catches_a_corrupted_word(fake_gpu, monkeypatch, capsys, world):
    def fake_peer_buffer(nbytes, pattern="next"):
        return _symmetric(world, nbytes, pattern)[1][0]
    monkeypatch.setattr(targets, "peer_buffer", fake_peer_buffer)
    assert bench_microbench.main(["--selftest", "--target", "peer", "--peer-pattern", "all", "--small"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["peer_pattern"] == "all" and out["world_size"] == world
    region = "region of rank 0's buffer" if world == 1 else "region of rank 1's buffer"
    assert "pattern check failed on the device: 1 of" in out["corruption_caught"] and region in out["corruption_caught"]


def test_selftest_next_on_a_device_target_catches_a_corrupted_word(fake_gpu, capsys):
    assert bench_microbench.main(["--selftest", "--target", "local", "--small"]) == 0
    assert "pattern check failed on the device: 1 of" in json.loads(capsys.readouterr().out)["corruption_caught"]


# --- records and the CLI ----------------------------------------------------------------------------

def test_calibrate_all_pattern_records_say_so(fake_gpu, monkeypatch, tmp_path, capsys):
    import xstage.provenance
    from xstage.records import load_records
    from xstage.sim.platform import Platform
    monkeypatch.setattr(xstage.provenance, "gpu_info", lambda: {"gpu": "Fake H200"})
    monkeypatch.setattr(targets, "peer_buffer", lambda nbytes, pattern="next": _symmetric(1, nbytes, pattern)[1][0])
    out = tmp_path / "a2a"
    rc = main(["calibrate", "--target", "peer", "--peer-pattern", "all", "--self-peer", "--out", str(out), "--no-copy",
               "--bursts", "4", "--steady", "16KiB", "--iso-bursts", "3", "--trials", "1", "--gap-fractions", "0.5,1.5",
               "--producers", "4,8", "--sizes", "1KiB,2KiB", "--gap-configs", "8:2KiB", "--iso-producers", "8",
               "--iso-sizes", "1KiB,2KiB,4KiB", "--ring", "64KiB", "--json"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["peer_pattern"] == "all"
    points, meta = load_records(out / "points.parquet", "point")
    bursts, _ = load_records(out / "bursts.parquet", "burst")
    assert set(points["peer_pattern"]) == {"all"} and set(bursts["peer_pattern"]) == {"all"}
    assert meta["config"]["peer_pattern"] == "all" and meta["runner"]["target_info"]["peer_pattern"] == "all"
    plat = Platform.load(out / "platform.json")
    assert plat.name == "h200-peer-a2a" and "--peer-pattern all" in plat.description
    assert plat.notes["peer_pattern"].startswith("all: all-to-all over W = 1")
    assert calibrate.refit(out, overwrite=True)["peer_pattern"] == "all"


def test_next_pattern_is_the_default_and_host_records_have_no_pattern(tmp_path):
    from xstage.sim.calib_runner import SimRunner
    from xstage.records import load_records
    from xstage.sim.platform import load_platform
    cfg = dict(producers=(16, 132), sizes=(8192, 65536), gap_configs=((132, 32768),), gap_fractions=(0.5, 1.5),
               iso_producers=(132,), iso_sizes=(8192, 65536, 262144), bursts=4, steady_bytes=0, max_bursts=8,
               iso_bursts=3, trials=1, copy_engine=False, free_running=False)
    plat = load_platform("paper-b200")
    peer = calibrate.run_calibration(calibrate.CalibConfig(target="peer", **cfg), SimRunner(plat), tmp_path / "p",
                                     progress=False, provenance_block={})
    host = calibrate.run_calibration(calibrate.CalibConfig(target="host", **cfg), SimRunner(plat), tmp_path / "h",
                                     progress=False, provenance_block={})
    assert peer["peer_pattern"] == "next" and "peer_pattern" not in host
    assert set(load_records(tmp_path / "p" / "points.parquet", "point")[0]["peer_pattern"]) == {"next"}
    assert "peer_pattern" not in load_records(tmp_path / "h" / "points.parquet", "point")[0]
    assert peer["platform"] == "gpu-peer"


@pytest.mark.parametrize("argv, message", [
    (["--target", "peer", "--peer-pattern", "ring"], "xstage: error: --peer-pattern(='ring') must be one of next, all"),
    (["--target", "host", "--peer-pattern", "all"],
     "xstage: error: --peer-pattern(='all') needs --target peer (got --target host)"),
    (["--target", "local", "--peer-pattern", "all", "--sim", "paper-b200"],
     "xstage: error: --peer-pattern(='all') needs --target peer (got --target local)"),
])
def test_cli_refuses_bad_patterns_in_one_line(argv, message, capsys, tmp_path):
    assert main(["calibrate", *argv, "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == message


def test_selftest_cli_refuses_all_on_host(capsys):
    assert bench_microbench.main(["--selftest", "--target", "host", "--peer-pattern", "all"]) == 2
    assert capsys.readouterr().err.strip() == ("microbench: error: --peer-pattern(='all') needs --target peer "
                                               "(got --target host)")


@pytest.mark.gpu
def test_all_pattern_selftest_at_world_size_1_on_gpu(gpu, tmp_path):
    """The multi-destination kernels on a real GPU: world size 1, every producer -> the own buffer."""
    pytest.importorskip("torch.distributed", reason="the peer target on the CUDA GPU launches through torchrun")
    env = targets.apply_launch_env(dict(os.environ))
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
                          "-m", "xstage.hw.microbench.runner", "--selftest", "--small", "--target", "peer",
                          "--peer-pattern", "all"], capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert out["peer_pattern"] == "all" and "pattern check failed on the device" in out["corruption_caught"]


def test_kernel_rows_are_named_after_the_gpu_that_ran_them(monkeypatch):
    """The attention, FA4 and MoE benches label their rows with the platform of the GPU in the process (an H100's
    rows were labelled h200-pcie-host before session 23); with no GPU the old name stays."""
    from types import SimpleNamespace

    from xstage import provenance
    from xstage.hw.attention import fa4_records
    from xstage.records import attention, moe

    lay = SimpleNamespace(label=lambda: "cfg", flops=1.0, seq_len=8, heads=1, head_dim=64, world_size=8, rank=0,
                          remote_bytes=7)
    problem = SimpleNamespace(label=lambda: "cfg", flops=1.0, to_dict=lambda: {})
    monkeypatch.setattr(provenance, "_gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    assert provenance.this_gpu_platform() == "h100-pcie-host"
    assert provenance.this_gpu_platform("local") == "h100-local"
    assert fa4_records.kernel_row(lay, "fa4", [1.0, 2.0])["platform"] == "h100-pcie-host"
    assert moe.kernel_row(problem, "expert_wave", [1.0])["platform"] == "h100-pcie-host"
    assert fa4_records.kernel_row(lay, "fa4", [1.0], platform="mine")["platform"] == "mine"
    monkeypatch.setattr(provenance, "_gpu_name", lambda: "")
    assert provenance.this_gpu_platform() == "h200-pcie-host" == attention.PLATFORM
    assert fa4_records.kernel_row(lay, "fa4", [1.0])["platform"] == "h200-pcie-host"
