"""The microbenchmark's host side on a fake CuPy (numpy kernels): records, checks, errors, the CLI.

The fake runs the four kernels of microbench.cu in numpy with synthetic timestamps, so the launch
arguments, the record layout, the pattern check and the calibration pipeline are exercised without
a GPU. The CUDA source itself is checked on the GPU (benchmarks/gpu/calibrate.sh).
"""

import sys
import types

import numpy as np
import pytest

from xstage.cli import bench_microbench
from xstage.hw.microbench import runner as mb

_MEM = {}  # address -> numpy uint8 array (real host memory: pointers are real addresses)


def _alloc(nbytes):
    buf = np.zeros(max(int(nbytes), 16) + 16, dtype=np.uint8)
    addr = buf.ctypes.data
    _MEM[addr] = buf
    return addr


def _view(ptr, dtype):
    ptr = int(ptr)
    for base, buf in _MEM.items():
        if base <= ptr < base + buf.size:
            return buf[ptr - base:].view(np.uint8)[: (buf.size - (ptr - base)) // np.dtype(dtype).itemsize
                                                     * np.dtype(dtype).itemsize].view(dtype)
    raise AssertionError(f"unknown pointer {ptr:#x}")


class FakeArray:
    def __init__(self, n, dtype):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(n) if isinstance(n, tuple) else (int(n),)
        self.size = int(np.prod(self.shape))
        self.ptr = _alloc(self.size * self.dtype.itemsize)
        self.data = types.SimpleNamespace(ptr=self.ptr)

    @property
    def a(self):
        return _view(self.ptr, self.dtype)[: self.size].reshape(self.shape)

    def get(self):
        return self.a.copy()

    def fill(self, v):
        self.a[:] = v

    def set(self, x):
        self.a[:] = x


class Behaviour:
    corrupt = False     # the burst kernel loses one store
    err = 0             # the burst kernel reports this error code
    same_sm = False     # two producers land on one SM
    issue_ns = 900      # synthetic issue time
    gap_extra_ns = 100


def _args(args):
    return [a.ptr if isinstance(a, FakeArray) else int(a) for a in args]


def _burst(grid, block, args, shared_mem=0):
    dst, W, slots, n, mode, gap_kind, gap_param, settle, timeout, counter, rec, sm_of, sink, err = _args(args)
    K = grid[0]
    assert shared_mem > 0 and block[0] % 32 == 0
    words = _view(dst, np.uint32).reshape(-1, 4)
    r = _view(rec, np.uint64)[: K * n * mb.NREC].reshape(K, n, mb.NREC)
    _view(sm_of, np.uint32)[:K] = np.arange(K) if not Behaviour.same_sm else 0
    gap_ns = gap_param if gap_kind == 0 else gap_param // 2 if gap_kind == 1 else gap_param * 4
    period = Behaviour.issue_ns + gap_ns + Behaviour.gap_extra_ns
    for p in range(K):
        for b in range(n):
            base = ((b % slots) * K + p) * W
            words[base:base + W] = mb.pattern_words(p, b, np.arange(W))
            t0 = 1_000_000 + (p * 13 if mode == 0 else 0) + b * period   # free-running producers drift
            r[p, b] = [t0, t0 + Behaviour.issue_ns, 2 * t0, 2 * (t0 + Behaviour.issue_ns),
                       t0 + 2 * Behaviour.issue_ns if mode == 1 else 0, t0 + period]
    if Behaviour.corrupt:
        words[3, 1] ^= 4
    _view(err, np.int32)[0] = Behaviour.err


def _fill(grid, block, args, shared_mem=0):
    dst, n = _args(args)
    _view(dst, np.uint32)[: 4 * n] = 0


def _verify(grid, block, args, shared_mem=0):
    dst, W, K, slots, n, out = _args(args)
    got = _view(dst, np.uint32)[: slots * K * W * 4].reshape(-1, 4)
    want = mb.expected_buffer(K, W, slots, n).reshape(-1, 4)
    bad = np.flatnonzero((got != want).any(axis=1))
    o = _view(out, np.uint64)
    o[0] = bad.size
    if bad.size:
        o[1] = bad[0]


def _probe(grid, block, args, shared_mem=0):
    gt, ck, n, span_ns, span, err = _args(args)
    _view(gt, np.uint64)[:n] = (np.arange(n) // 3) * 32
    _view(ck, np.uint64)[:n] = np.arange(n) * 20
    _view(span, np.uint64)[:4] = [0, span_ns, 0, int(span_ns * 1.98)]


class FakeKernel:
    def __init__(self, fn):
        self.fn = fn
        self.max_dynamic_shared_size_bytes = 0

    def __call__(self, grid, block, args, shared_mem=0):
        self.fn(grid, block, args, shared_mem=shared_mem)


class FakeModule:
    def __init__(self, code, options=()):
        for name in ("burst_kernel", "fill_zero", "verify_pattern", "timer_probe"):
            assert f"__global__ void {name}(" in code.replace("\n", " ").replace("__launch_bounds__(1024) ", "") \
                or f"{name}(" in code
        self.kernels = {"burst_kernel": FakeKernel(_burst), "fill_zero": FakeKernel(_fill),
                        "verify_pattern": FakeKernel(_verify), "timer_probe": FakeKernel(_probe)}

    def get_function(self, name):
        return self.kernels[name]


def _make_cupy():
    cp = types.ModuleType("cupy")
    cp.uint64, cp.uint32, cp.int32, cp.float32, cp.uint8 = np.uint64, np.uint32, np.int32, np.float32, np.uint8
    cp.zeros = lambda n, dtype: FakeArray(n, dtype)
    cp.empty = lambda n, dtype: FakeArray(n, dtype)
    cp.RawModule = FakeModule
    dev = types.SimpleNamespace(id=0, compute_capability="90", use=lambda: None,
                                attributes={"MultiProcessorCount": 132, "MaxSharedMemoryPerMultiprocessor": 233472,
                                            "MaxSharedMemoryPerBlockOptin": 232448})
    rt = types.SimpleNamespace(
        getDeviceCount=lambda: 1, deviceSynchronize=lambda: None, hostAllocMapped=2, hostAllocPortable=1,
        hostAlloc=lambda n, flags: _alloc(n), freeHost=lambda ptr: None,
        getDeviceProperties=lambda i: {"name": b"Fake H200"})
    event = lambda: types.SimpleNamespace(record=lambda *a: None, synchronize=lambda: None)  # noqa: E731
    cp.cuda = types.SimpleNamespace(Device=lambda *a: dev, runtime=rt, Event=event,
                                    get_elapsed_time=lambda a, b: 0.5)
    return cp


@pytest.fixture
def fake_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _make_cupy())
    for k, v in {"corrupt": False, "err": 0, "same_sm": False}.items():
        monkeypatch.setattr(Behaviour, k, v)
    yield
    _MEM.clear()


def _bench(target="host", nbytes=4 << 20):
    from xstage.hw.common.targets import open_target
    return mb.Microbench(open_target(target, nbytes))


def test_timer_probe_reports_tick_and_clock(fake_cupy):
    bench = _bench()
    info = bench.probe_timer(reads=300, span_us=100)
    assert info["tick_ns"] == 32.0 and info["resolved"] and info["timebase"] == "globaltimer"
    assert info["sm_clock_GHz"] == pytest.approx(1.98)
    assert info["distinct_deltas_ns"] == {32: 99}


@pytest.mark.parametrize("mode", ["periodic", "isolated", "free", "aligned"])
def test_run_builds_burst_records(fake_cupy, mode):
    bench = _bench()
    spec = mb.BurstSpec(5, 1024, 2.0, mode=mode, bursts=6, trials=2, warmup=1)
    frame, info = bench.run(spec, cpu_verify=True)
    assert len(frame) == 5 * 6 * 2 and info["cpu_verified"] and info["slots"] == 6   # fresh addresses
    assert set(frame["trial"]) == {0, 1}
    assert np.allclose(frame["issue(us)"], 0.9)
    assert np.allclose(frame["period(us)"].dropna(), 0.9 + 2.0 + 0.1)
    assert frame["period(us)"].isna().sum() == 5 * 2          # the last burst has no period
    assert np.allclose(frame["gap_measured(us)"].dropna(), 2.1)
    fence = frame["fence(us)"]
    assert (np.allclose(fence, 1.8) if mode == "isolated" else fence.isna().all())
    s = mb.summarize_run(frame)
    assert s["T_iss(us)"] == pytest.approx(0.9) and s["period(us)"] == pytest.approx(3.0, rel=0.02)
    assert s["kernel(GBps)"] == pytest.approx(5 * 6 * 1024 / 500.0 / 1e3)     # 0.5 ms per fake launch


def test_clock_timebase_when_tick_is_coarse(fake_cupy):
    bench = _bench()
    bench.probe_timer(reads=64, span_us=10)
    bench.timer["timebase"] = "clock64"
    frame, _ = bench.run(mb.BurstSpec(3, 512, 1.0, bursts=4, trials=1, warmup=0))
    # clock64 runs at 2 ticks per ns in the fake: the run's own clock rate is measured, not assumed
    assert np.allclose(frame["issue(us)"], 0.9) and np.allclose(frame["issue_clk(us)"], 0.9)


def test_lost_store_is_caught(fake_cupy):
    Behaviour.corrupt = True
    with pytest.raises(mb.MicrobenchError, match="pattern check failed"):
        _bench().run(mb.BurstSpec(4, 1024, bursts=3, trials=1))


def test_kernel_error_flag_is_reported(fake_cupy):
    Behaviour.err = 1
    with pytest.raises(mb.MicrobenchError, match="barrier timed out"):
        _bench().run(mb.BurstSpec(4, 1024, bursts=3, trials=1))


def test_two_producers_on_one_sm_is_refused(fake_cupy):
    Behaviour.same_sm = True
    with pytest.raises(mb.MicrobenchError, match="only 1 SMs"):
        _bench("local").run(mb.BurstSpec(4, 1024, bursts=3, trials=1))


def test_buffer_too_small_and_too_many_producers(fake_cupy):
    from xstage.errors import InputError
    bench = _bench(nbytes=4096)
    with pytest.raises(InputError, match="target buffer"):
        bench.run(mb.BurstSpec(4, 2048, bursts=3, trials=1))
    with pytest.raises(InputError, match="132 SMs"):
        bench.run(mb.BurstSpec(133, 16, bursts=3, trials=1))


def test_cli_calibrate_quick_on_fake_gpu(fake_cupy, tmp_path, capsys, monkeypatch):
    import xstage.provenance
    from xstage.cli import main
    monkeypatch.setattr(xstage.provenance, "gpu_info", lambda: {"gpu": "Fake H200"})  # no torch import
    from xstage.records import load_records
    from xstage.sim.platform import Platform

    out = tmp_path / "cal"
    rc = main(["calibrate", "--target", "host", "--out", str(out), "--no-copy", "--name", "fake-host",
               "--bursts", "4", "--steady", "16KiB", "--iso-bursts", "3", "--trials", "1", "--gap-fractions", "0.5,1.5",
               "--producers", "4,8", "--sizes", "1KiB,2KiB", "--gap-configs", "8:2KiB", "--iso-producers", "8",
               "--iso-sizes", "1KiB,2KiB,4KiB", "--aligned", "--json"])
    assert rc == 0
    plat = Platform.load(out / "platform.json")
    assert plat.name == "fake-host" and plat.target == "host" and plat.sm_count == 132
    frame, meta = load_records(out / "bursts.parquet", "burst")
    assert meta["runner"]["timer"]["tick_ns"] == 32.0 and meta["config"]["target"] == "host"
    assert set(frame["phase"]) >= {"rate", "plateau", "gap", "fma", "isolated", "free-rate", "free-gap",
                                   "aligned-rate", "aligned-gap"}
    assert set(frame.loc[frame["phase"] == "aligned-gap", "mode"]) == {"aligned"}
    assert "R_GBps" in capsys.readouterr().out


def test_selftest_runs_and_catches_a_corrupted_word(fake_cupy, capsys):
    assert bench_microbench.main(["--selftest", "--target", "host", "--small"]) == 0
    out = capsys.readouterr()
    assert '"corruption_caught"' in out.out and "pattern check failed" in out.out
    assert "tick 32 ns" in out.err


def test_slots_give_fresh_addresses_within_the_ring(fake_cupy):
    from xstage.hw.common.targets import open_target
    bench = mb.Microbench(open_target("local", 1 << 20), ring_bytes=64 * 1024)
    assert bench.slots_for(mb.BurstSpec(4, 1024, bursts=100)) == 16     # 64 KiB ring / 4 KiB bursts
    assert bench.slots_for(mb.BurstSpec(4, 1024, bursts=10)) == 10      # never more than the bursts
    assert bench.slots_for(mb.BurstSpec(4, 65536, bursts=10)) == 4      # at least 4 copies ...
    assert bench.slots_for(mb.BurstSpec(8, 65536, bursts=10)) == 2      # ... unless the buffer is smaller


def test_raw_record_sample_keeps_producers_trial0_head_and_tail():
    import pandas as pd
    from xstage.hw.calib.calibrate import _keep
    K, n = 10, 200
    frame = pd.DataFrame({"producer": np.repeat(np.arange(K), n).tolist() * 2, "burst": np.tile(np.arange(n), K).tolist() * 2,
                          "trial": [0] * (K * n) + [1] * (K * n)})
    kept = _keep(frame, K, 4)
    assert set(kept["trial"]) == {0} and set(kept["producer"]) == {0, 3, 6, 9}
    assert sorted(set(kept["burst"])) == list(range(32)) + list(range(136, 200))
