"""benchmarks/gpu/lockstep_drained.py on a fake microbenchmark (no GPU): ``--probe`` adds one run per K of the grid
at 2 KiB before that target's grid, in the same process, and without it the records are as before."""

import json

import numpy as np
import pandas as pd
import pytest

from .bench_scripts import load_script

SKEW_US = 0.096          # the fake barrier's start skew: the last producer starts this long after the first


def _load():
    return load_script("lockstep_drained", "gpu")


class FakeMicrobench:
    """``Microbench``'s run(spec) -> (frame, info) on a made-up lockstep: producer p of K starts burst b at
    b * 2 us + SKEW_US * p / (K - 1) and issues for 0.032 us per KiB; every launch is logged in ``launches``."""

    launches: list = []

    def __init__(self, target):
        self.target = target

    def probe_timer(self):
        return {"tick_ns": 32.0, "timebase": "globaltimer"}

    def run(self, spec):
        K, n = spec.producers, spec.bursts
        FakeMicrobench.launches.append((self.target, K, spec.bytes_per_producer, n))
        p, b = np.repeat(np.arange(K), n), np.tile(np.arange(n), K)
        start = b * 2.0 + SKEW_US * p / max(K - 1, 1)
        frames = [pd.DataFrame({"mode": spec.mode, "bytes_per_producer": spec.bytes_per_producer, "producer": p,
                                "burst": b, "trial": trial, "start(us)": start,
                                "issue(us)": 0.032 * spec.bytes_per_producer / 1024, "period(us)": 2.0,
                                "end_fence(us)": n * 2.0 + 1.0, "kernel(us)": n * 2.0 + 5.0})
                  for trial in range(spec.trials)]
        return pd.concat(frames, ignore_index=True), {"slots": 1}

    def close(self):
        pass


@pytest.fixture
def fake_device(monkeypatch):
    import xstage.hw.common.targets as targets
    import xstage.hw.microbench.runner as runner
    FakeMicrobench.launches = []
    monkeypatch.setattr(runner, "Microbench", FakeMicrobench)
    monkeypatch.setattr(targets, "open_target", lambda name, nbytes: name)
    return FakeMicrobench.launches


def test_probe_runs_one_2kib_run_per_k_before_the_grid_in_one_process(tmp_path, fake_device):
    ld = _load()
    assert ld.main(["--out", str(tmp_path / "r"), "--targets", "host,local", "--probe"]) == 0
    ks = sorted({K for K, _, _ in ld.GRID["host"]})
    probes = [[K, 2048, 64] for K in ks]
    assert ld.probe_runs(ld.GRID["host"]) == probes and len(probes) == 17
    grid = {t: [tuple(r) for r in ld.GRID[t]] for t in ("host", "local")}
    assert fake_device == ([("host", *r) for r in map(tuple, probes)] + [("host", *r) for r in grid["host"]]
                           + [("local", *r) for r in map(tuple, probes)] + [("local", *r) for r in grid["local"]])
    fs = load_script("finite_skew")
    probe = fs.skews(tmp_path / "r" / "probe")
    assert list(probe["K"][probe["target"] == "host"]) == ks
    assert probe["skew_us"].to_numpy() == pytest.approx(SKEW_US)
    assert probe["T_iss_us"].to_numpy() == pytest.approx(SKEW_US + 0.064)      # skew + 2 KiB at 0.032 us / KiB
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["probe"]["runs"]["local"] == probes and meta["probe"]["skipped_for_budget"] == []
    assert len(pd.read_csv(tmp_path / "r" / "runs.csv")) == 2 * 30 * ld.TRIALS


def test_without_probe_the_records_are_as_before(tmp_path, fake_device):
    ld = _load()
    assert ld.main(["--out", str(tmp_path / "r"), "--targets", "local"]) == 0
    assert fake_device == [("local", *r) for r in map(tuple, ld.GRID["local"])]
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["bursts.csv.gz", "meta.json", "runs.csv"]
    assert "probe" not in json.loads((tmp_path / "r" / "meta.json").read_text())
    runs = pd.read_csv(tmp_path / "r" / "runs.csv")
    assert list(runs.columns) == ["target", "K", "B", "n", "trial", "T_iss_us", "period_us", "drained_us",
                                  "kernel_us", "T_iss_producer_us", "slots"]
