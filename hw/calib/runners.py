"""The GPU runner of the calibration sweep: the CUDA microbenchmark on one target buffer. Its simulator twin,
for dry runs and tests, is ``xstage.sim.calib_runner.SimRunner`` (pure, so it lives in sim/).

A runner has ``sm_count``, ``supports_fma``, ``describe() -> dict`` (goes into the records' meta),
``run(spec) -> (frame, info)`` returning burst records in the microbenchmark's columns, and
``copy_engine(volumes) -> DataFrame`` (kernel record rows; empty where it does not apply).
"""

import time

import numpy as np
import pandas as pd

from xstage.hw.microbench.runner import BurstSpec
from xstage.hw.common.log import hw_log
from xstage.sim.calib_runner import SimRunner  # noqa: F401 - moved to sim/ (pure); the old name still works


class GpuRunner:
    """The CUDA microbenchmark on one target buffer (GPU imports happen here)."""

    supports_fma = True

    def __init__(self, target: str, buffer_bytes: int, *, self_peer: bool = False, timeout_ms: float = 2000.0,
                 ring_bytes: int = 256 * 2**20, peer_pattern: str = "next", backend: str = "torch",
                 issue: str = "store"):
        from xstage.hw.microbench.runner import Microbench
        from xstage.hw.common.targets import open_target
        self.target = open_target(target, buffer_bytes, self_peer=self_peer, peer_pattern=peer_pattern,
                                  backend=backend)
        self.issue = issue
        if issue == "store":
            self.mb = Microbench(self.target, timeout_ms=timeout_ms, ring_bytes=ring_bytes)
        else:                      # NVSHMEM device puts (xstage.hw.microbench.puts), same protocol and records
            from xstage.hw.microbench.puts import PutMicrobench
            self.mb = PutMicrobench(self.target, issue=issue, timeout_ms=timeout_ms, ring_bytes=ring_bytes)
        self.sm_count = self.mb.sm_count
        t = time.perf_counter()
        self.timer = self.mb.probe_timer()
        hw_log(f"[calibrate] %globaltimer tick {self.timer['tick_ns']:.0f} ns (distinct deltas "
              f"{self.timer['distinct_deltas_ns']}), SM clock {self.timer['sm_clock_GHz']:.3f} GHz, "
              f"durations from {self.timer['timebase']} ({time.perf_counter() - t:.1f} s)")
        self.verified_words = 0

    def run(self, spec: BurstSpec):
        frame, info = self.mb.run(spec)
        self.verified_words += info["verified_words"]
        return frame, info

    def describe(self) -> dict:
        import cupy
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        return {"runner": "gpu", "gpu_name": name, "sm_count": self.sm_count,
                "compute_capability": self.mb.compute_capability, "timer": self.timer,
                "one_cta_per_sm_dynamic_smem_bytes": self.mb.pad_bytes, "target_buffer_bytes": self.target.nbytes,
                "ring_bytes": self.mb.ring_bytes, "issue": self.issue,
                "target_info": self.target.info, "verified_words": self.verified_words}

    def copy_engine(self, volumes, trials: int = 10) -> pd.DataFrame:
        """torch copy device -> pinned host of each volume; median of ``trials`` after a warm-up."""
        try:
            import torch
        except ImportError:
            return pd.DataFrame()
        if not torch.cuda.is_available():
            return pd.DataFrame()
        rows = []
        for v in sorted({int(x) for x in volumes}):
            src = torch.empty(v, dtype=torch.uint8, device="cuda").fill_(7)
            dst = torch.empty(v, dtype=torch.uint8, pin_memory=True)
            times = []
            for k in range(trials + 1):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                dst.copy_(src, non_blocking=True)
                b.record()
                b.synchronize()
                if k:
                    times.append(a.elapsed_time(b) * 1e3)
            if int(dst[::max(1, v // 64)].min()) != 7:
                raise RuntimeError("copy-engine check: pinned buffer does not hold the copied bytes")
            t = float(np.median(times))
            rows.append({"source": "hw", "experiment": "copy-engine", "config": f"V={v}",
                         "variant": "torch d2h pinned", "time(us)": t, "trials": trials, "volume(bytes)": v,
                         "copy(GBps)": v / t / 1e3})
            del src, dst
        return pd.DataFrame(rows)

    def close(self):
        self.mb.close()
