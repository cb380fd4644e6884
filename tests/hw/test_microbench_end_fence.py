"""The microbenchmark's end fence (``BurstSpec.end_fence``): the last burst's drain time in ``end_fence(us)``,
from the run's first start; the per-burst ``fence(us)`` and every other column as without it (CPU: the record
frame from synthetic device records; GPU: a real lockstep run)."""

import numpy as np
import pytest

from xstage.errors import InputError
from xstage.hw.microbench.runner import NREC, BurstSpec, Microbench


def _bench():
    mb = object.__new__(Microbench)            # no GPU: only what _frame reads
    mb.timer = {"timebase": "globaltimer"}
    mb.target = type("T", (), {"name": "host"})()
    return mb


def _records(K=3, n=4, last_fence=True):
    r = np.zeros((K, n, NREC), dtype=np.int64)
    for p in range(K):
        for b in range(n):
            start = 1_000_000 + 10_000 * b + 100 * p
            r[p, b, 0], r[p, b, 1] = start, start + 2_000 + 50 * p
            r[p, b, 2], r[p, b, 3] = 2 * r[p, b, 0], 2 * r[p, b, 1]
            r[p, b, 5] = r[p, b, 1]
        if last_fence:
            r[p, n - 1, 4] = r[p, n - 1, 1] + 5_000 + 1_000 * p
    return r


def test_end_fence_column_is_the_last_burst_drain_from_the_first_start():
    spec = BurstSpec(3, 4096, mode="periodic", bursts=4, end_fence=True)
    frame, _ = _bench()._frame(spec, _records(), np.arange(3), trial=0)
    last = frame[frame["burst"] == 3]
    assert frame.loc[frame["burst"] < 3, "end_fence(us)"].isna().all()
    # producer 2: last start 1_030_200 ns, issue end + 2_100, fence + 7_000 ns, from the first start 1_000_000
    assert last["end_fence(us)"].max() == pytest.approx((1_030_200 + 2_100 + 7_000 - 1_000_000) / 1e3)
    assert frame["fence(us)"].isna().all()     # not a per-burst fence


def test_without_end_fence_the_frame_is_unchanged():
    spec = BurstSpec(3, 4096, mode="periodic", bursts=4)
    frame, _ = _bench()._frame(spec, _records(last_fence=False), np.arange(3), trial=0)
    assert "end_fence(us)" not in frame and frame["fence(us)"].isna().all()
    with_fence, _ = _bench()._frame(BurstSpec(3, 4096, mode="periodic", bursts=4, end_fence=True), _records(),
                                    np.arange(3), trial=0)
    assert with_fence.drop(columns=["end_fence(us)"]).equals(frame)


def test_the_end_fence_runs_its_own_kernel_build():
    mb = object.__new__(Microbench)            # no GPU: only what _burst_launch reads
    mb.k_burst, mb.kernel = "burst_kernel", lambda name: name
    mb.target = type("T", (), {"layout": lambda self, K: None})()
    regions = [{"ptr": 4096}]
    kernel, head = mb._burst_launch(BurstSpec(3, 4096, mode="periodic", bursts=4), regions)
    assert kernel == "burst_kernel" and [int(x) for x in head] == [4096]
    kernel, _ = mb._burst_launch(BurstSpec(3, 4096, mode="periodic", bursts=4, end_fence=True), regions)
    assert kernel == "burst_kernel_end_fence"


def test_end_fence_is_refused_where_it_has_no_meaning():
    with pytest.raises(InputError, match="end_fence"):
        BurstSpec(4, 4096, mode="isolated", end_fence=True)
    with pytest.raises(InputError, match="end_fence"):
        BurstSpec(4, 4096, end_fence=1)
    with pytest.raises(InputError, match="zero gap"):
        BurstSpec(4, 4096, 2.0, mode="periodic", end_fence=True)
    with pytest.raises(InputError, match="zero gap"):
        BurstSpec(4, 4096, gap_kind="fma", fma_iters=10, mode="free", end_fence=True)
    assert BurstSpec(4, 4096, gap_kind="fma", fma_iters=0, mode="free", end_fence=True).end_fence


@pytest.mark.gpu
def test_lockstep_end_fence_on_gpu(gpu):
    from xstage.hw.common.targets import open_target
    from xstage.sim.burst_summary import summarize_run
    mb = Microbench(open_target("local", 64 * 2**20))
    try:
        spec = BurstSpec(8, 32768, mode="periodic", bursts=8, trials=2, warmup=1, end_fence=True)
        frame, info = mb.run(spec)             # pattern checked on the device every trial
        for _, t in frame.groupby("trial"):
            drained = t["end_fence(us)"].max()
            last = t[t["burst"] == 7]
            assert drained >= (last["start(us)"] + last["issue(us)"]).max()
            assert drained < t["kernel(us)"].iloc[0]       # the kernel ends after its last fence
        assert summarize_run(frame)["T_iss(us)"] > 0
    finally:
        mb.close()
