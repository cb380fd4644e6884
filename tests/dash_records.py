"""Measured-like records for the dashboard tests (not collected by pytest: no ``test_`` prefix).

Simulated frames relabelled ``source="hw"`` and perturbed a little, in the record schemas, so that
every measured branch of every page (overlays, Table 2 measured, compare) is drawn. The tests
import it by path (they run with ``--import-mode=importlib``).
"""

from pathlib import Path

import pandas as pd

from xstage.compare.replays import simulate_fa_tiles, simulate_moe_tiles
from xstage.records import COLUMNS, save_records
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import load_platform

MOE_CONFIG = "DiT-MoE/w8a8/skewed/S"


def write_measured_like(folder: Path) -> Path:
    p = load_platform("paper-b200")
    meta = {"config": {"note": "test records: simulated, relabelled hw"}, "provenance": {}}
    frames = []
    for mode, K, B, G in [("periodic", 148, 32768, 0.0), ("periodic", 148, 32768, 3.0), ("local", 148, 32768, 3.0),
                          ("isolated", 148, 65536, 0.0)]:
        b = simulate_bursts(p, BurstConfig(K, B, G, bursts=8, mode=mode)).bursts
        b["issue(us)"] *= 1.03
        frames.append(b.assign(source="hw"))
    save_records(folder / "calibration" / "paper-b200" / "bursts.parquet", "burst",
                 pd.concat(frames, ignore_index=True), meta)

    tiles, _ = simulate_moe_tiles(MOE_CONFIG, p)
    tiles = tiles.assign(source="hw")
    tiles["issue_end(us)"] += 0.2
    save_records(folder / "moe" / "tiles.parquet", "tile", tiles[COLUMNS["tile"]], meta)
    ends = tiles.groupby("schedule")["issue_end(us)"].max()
    kernel = pd.DataFrame([{"source": "hw", "experiment": "moe", "config": MOE_CONFIG, "variant": v,
                            "time(us)": float(ends[v]) * 1.05, "trials": 5, "platform": "paper-b200"}
                           for v in ("expert_wave", "interleaved")])
    save_records(folder / "moe" / "kernels.parquet", "kernel", kernel, meta)

    M = 8192
    fa, _ = simulate_fa_tiles("fa4", M, p)
    only = float(fa.loc[fa["schedule"] == "fa_only", "issue_end(us)"].max())
    fused = fa[fa["schedule"] == "fused"]
    base = {"source": "hw", "experiment": "attention", "config": f"M{M}", "trials": 20, "platform": "paper-b200",
            "M": M, "heads": 4, "head_dim": 128, "world_size": 8, "rank": 0, "block_m": 128, "block_n": 128,
            "flops": 4.0 * M * M * 128 * 4}
    times = {"fa": only, "serial": only * 1.12, "fused": only * 1.01, "serial_best": only * 1.2, "sdpa": only * 0.9}
    save_records(folder / "attention" / "kernels.parquet", "kernel",
                 pd.DataFrame([{**base, "variant": v, "time(us)": t} for v, t in times.items()]), meta)
    hw_tiles = fused.assign(source="hw", n=fused["expert"], expert=-1, program=fused["sm"])
    save_records(folder / "attention" / "tiles.parquet", "tile", hw_tiles, meta)
    return folder
