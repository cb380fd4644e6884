"""Regenerate v1_figures.json: the burst simulator (both engines), the closed forms and the replay on every
bundled platform, computed by the code of a given checkout (run it with that checkout's xstage, e.g. main
before platform schema version 2):   python tests/sim/golden/make_v1_figures.py OUT.json"""

import json
import sys

import numpy as np

from xstage.sim import model
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import bundled_platforms, load_platform
from xstage.sim.replay import ReplayConfig, replay
from xstage.sim.schedules import expert_wave, interleaved, moe_grid

CASES = [(16, 32768, 0.0), (132, 4096, 2.0), (64, 131072, 10.0), (8, 262144, 0.5), (132, 32768, 40.0)]
MODES = ("periodic", "isolated", "coupled", "local")


def figures(name: str) -> dict:
    p = load_platform(name)
    out = {"hash": p.content_hash, "bursts": [], "model": [], "replay": []}
    for K, B, G in CASES:
        K = min(K, p.sm_count)
        V, R, t0, Q = K * B, p.drain_rate_Bpus, p.issue_time0_us(K, B), p.capacity_bytes(K)
        out["model"].append([t0, Q, model.issue_time_with_capacity_us(G, t0, V, R, Q),
                             model.periodic_period_us(G, t0, V, R, Q), model.isolated_issue_time_us(t0, V, R, Q),
                             model.coupled_period_us(G, V, R, t0), model.warmup_bursts(G, t0, V, R, Q)])
        for mode in MODES:
            for engine in ("exact", "simpy"):
                s = simulate_bursts(p, BurstConfig(K, B, G, bursts=12, mode=mode, engine=engine)).summary(p)
                out["bursts"].append([s[k] for k in ("T_iss_us", "period_us", "drained_us", "model_T_iss_us",
                                                     "model_period_us", "peak_queue_MiB", "Q_MiB", "T_iss0_us")])
    grid = moe_grid(np.array([256, 128, 384, 64]), hidden=1024, intermediate=512)
    for sched in (interleaved(grid, pairs=2, lead_rows=1), expert_wave(grid, pairs=2)):
        k = sched.column("kind")
        ml = np.where(k == 0, 3.0, 2.0)
        nbytes = np.where(k == 1, 32768.0, 0.0)
        for engine in ("fast", "simpy"):
            r = replay(sched, ml, nbytes, p, ReplayConfig(engine=engine, producers=min(8, p.sm_count)))
            out["replay"].append([r.makespan_us, r.drain_end_us, r.peak_queue_bytes,
                                  float(np.sum(r.arrays["epi_end"])), float(np.sum(r.arrays["stall"]))])
    return out


if __name__ == "__main__":
    data = {name: figures(name) for name in bundled_platforms()}
    with open(sys.argv[1], "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
