"""The simulator as a calibration runner: burst records of a known Platform, in the microbenchmark's columns.

``xstage calibrate --sim PLATFORM`` and the calibration tests sweep this instead of the GPU
(``GpuRunner`` in ``hw/calib/runners.py``); fitting its records must give the platform back. A runner has
``sm_count``, ``supports_fma``, ``describe() -> dict`` (goes into the records' meta), ``run(spec) -> (frame,
info)`` returning burst records, and ``copy_engine(volumes) -> DataFrame`` (empty here). ``spec`` is a
microbenchmark configuration (``BurstSpec`` of ``hw/microbench/spec.py``: producers, bytes_per_producer, gap_us,
bursts, mode, gap_kind, fma_iters); only its fields are read. Pure: no GPU library, no files.
"""

import pandas as pd

from xstage.sim.bursts import BurstConfig, simulate_bursts


class SimRunner:
    """The simulator behind the runner interface: burst records of a known Platform."""

    supports_fma = False

    def __init__(self, platform):
        self.platform = platform
        self.sm_count = platform.sm_count

    def run(self, spec):
        mode = "periodic" if spec.mode in ("free", "aligned") else spec.mode   # symmetric producers
        cfg = BurstConfig(spec.producers, spec.bytes_per_producer, spec.gap_us, bursts=spec.bursts, mode=mode)
        volume = spec.producers * spec.bytes_per_producer
        platform = self.platform.free_running(volume) if spec.mode == "free" else self.platform
        frame = simulate_bursts(platform, cfg, record_occupancy=False).bursts
        frame = frame.assign(trial=0, gap_kind=spec.gap_kind, fma_iters=spec.fma_iters, mode=spec.mode)
        frame["gap_measured(us)"] = frame["period(us)"] - frame["issue(us)"]
        return frame, {"verified_words": 0}

    def describe(self) -> dict:
        return {"runner": "sim", "platform": self.platform.name, "platform_hash": self.platform.content_hash,
                "sm_count": self.sm_count}

    def copy_engine(self, volumes, trials: int = 10) -> pd.DataFrame:
        return pd.DataFrame()

    def close(self):
        pass
