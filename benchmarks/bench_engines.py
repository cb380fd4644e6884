"""Benchmark: the closed-form burst engine beside the simpy engine, in one run.

Issue 19's target: >= 1e7 producer-bursts per second on 2 cores, ``xstage sim bursts -K 1024 -n 20000`` on a
1024-SM copy of paper-b200 under 3 s and 500 MB. Prints producer-bursts per second of each engine (wall
time of ``simulate_bursts`` + ``summary``; median of 5 runs for the exact engine, 3 for simpy), the
vectorised rate over many configurations, and the end-to-end CLI time and peak memory.
Run:  python benchmarks/bench_engines.py [--simpy-bursts 2000]
"""

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.bursts_exact import uniform_summaries
from xstage.sim.platform import load_platform


def _rate(platform, cfg, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        simulate_bursts(platform, cfg, record_occupancy=False).summary(platform)
        times.append(time.perf_counter() - t)
    return cfg.producers * cfg.bursts / statistics.median(times), statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simpy-bursts", type=int, default=2000)
    args = ap.parse_args()
    base = load_platform("paper-b200")
    big = dataclasses.replace(base, name="paper-b200-1024", sm_count=1024)
    print(f"cpu count {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    # first, while this process is small: a forked child starts with its parent's resident pages
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(big.to_dict(), f)
    cmd = [sys.executable, "-m", "xstage.cli", "sim", "bursts", "-p", f.name, "-K", "1024", "-B", "32KiB",
           "-G", "2", "-n", "20000", "--json"]
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    w = time.perf_counter() - t
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    os.unlink(f.name)
    s = json.loads(out.stdout)
    print(f"CLI `xstage sim bursts -K 1024 -n 20000` (1024-SM paper-b200): {w:.2f} s wall incl. start-up, "
          f"peak RSS {peak_mb:.0f} MB, T_iss {s['T_iss_us']:.4f} us, steady {s['steady']}")

    print(f"{'engine':<8} {'K':>5} {'bursts':>7} {'gap(us)':>8} {'wall(s)':>9} {'producer-bursts/s':>18}")
    rates = {}
    for gap in (0.0, 2.0, 10.0):
        for engine, plat, K, n, rep in (("exact", big, 1024, 20000, 5), ("simpy", base, 132, args.simpy_bursts, 3)):
            r, w = _rate(plat, BurstConfig(K, 32768, gap, n, engine=engine), rep)
            rates.setdefault(engine, []).append(r)
            print(f"{engine:<8} {K:>5} {n:>7} {gap:>8} {w:>9.4f} {r:>18,.0f}")
    print(f"exact / simpy (median over gaps): {statistics.median(rates['exact']) / statistics.median(rates['simpy']):,.0f}x")

    m, n = 10_000, 2_000
    rng = np.random.default_rng(0)
    K = rng.integers(1, 149, m)
    t0 = np.array([base.issue_time0_us(int(k), 32768) for k in K])
    Q = np.array([base.capacity_bytes(int(k)) for k in K])
    G = rng.uniform(0, 12, m)
    t = time.perf_counter()
    uniform_summaries("periodic", n, 0, t0, K * 32768.0, base.drain_rate_Bpus, Q, G)
    w = time.perf_counter() - t
    print(f"vectorised: {m:,} configurations x {n:,} bursts in {w:.2f} s = {K.sum() * n / w:,.0f} producer-bursts/s")


if __name__ == "__main__":
    main()
