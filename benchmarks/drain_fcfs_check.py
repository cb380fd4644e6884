"""First-come-first-served drain sharing against fair, on the host probe's zero-gap runs (docs/calibration.md,
*How the H200 shares the drain*): prints the median burst span when the oldest burst is served first.

    python benchmarks/drain_fcfs_check.py

A full queue drains at R; the active bursts are served oldest start first, each up to its own rate B / T_iss0
(T_iss0 from the committed host wide platform), every producer issuing n bursts back to back. The queue's
fill (a few us of a ~3.8 ms run) is left out. Prints, per (K, B): this median span, K B / R (what fair sharing
gives once the queue is full) and the probe's measured median span (fresh destinations, system fence, trial 0).
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.sim.platform import load_platform

EXTRA = Path("data/calibration-extra")
CASES = ((8, 4096), (8, 32768), (16, 16384), (64, 16384), (132, 32768))


def fcfs_median_span(K: int, B: float, n: int, t0: float, R: float) -> float:
    r = B / t0
    left, done = np.full(K, float(B)), np.zeros(K, int)
    start = np.arange(K) * 1e-9                        # ties broken by producer index
    t, spans, act = 0.0, [], np.ones(K, bool)
    while act.any():
        rate, room = np.zeros(K), R
        for q in np.argsort(np.where(act, start, np.inf)):
            if not act[q] or room <= 0:
                break
            rate[q] = min(r, room)
            room -= rate[q]
        dt = np.where(rate > 0, left / np.maximum(rate, 1e-300), np.inf).min()
        t += dt
        left -= rate * dt
        for q in np.flatnonzero(act & (left <= 1e-6 * B)):
            spans.append(t - start[q])
            done[q] += 1
            start[q], left[q] = t, B
            act[q] = done[q] < n
    return float(np.median(spans))


def main() -> int:
    p = load_platform(EXTRA / "h200-pcie-host-wide/platform.json")
    runs = pd.read_csv(EXTRA / "host-probe-3a47e1b" / "runs.csv.gz")   # the probe the docs quote
    runs = runs[(runs.trial == 0) & (runs.dest == "fresh") & (runs.fence == "system")]
    for K, B in CASES:
        r = runs[(runs.producers == K) & (runs.bytes_per_producer == B)].iloc[0]
        m = fcfs_median_span(K, B, int(r.bursts), p.issue_time0_us(K, B), p.drain_rate_Bpus)
        print(f"K={K:3d} B={B // 1024:3d}K n={int(r.bursts):5d}: FCFS median span {m:.3f} us, K B/R "
              f"{K * B / p.drain_rate_Bpus:.3f} us, measured {r.span_median_us:.3f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
