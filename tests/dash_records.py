"""Measured-like records for the dashboard tests (not collected by pytest: no ``test_`` prefix).

Simulated frames relabelled ``source="hw"`` and perturbed a little, in the record schemas, so that
every measured branch of every page (overlays, Table 2 measured, compare) is drawn. The tests
import it by path (they run with ``--import-mode=importlib``).
"""

from pathlib import Path

import pandas as pd

from xstage.compare.replays import simulate_fa_tiles, simulate_moe_tiles
from xstage.records import COLUMNS, save_records
from xstage.records.platform import save_platform
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import load_platform

MOE_CONFIG = "DiT-MoE/w8a8/skewed/S"
# calibration points (phase, mode, K, B, gap): lockstep rate / gap / FMA, free-running, isolated
POINTS = [("rate", "periodic", "spin", 148, 32768, 0.0), ("gap", "periodic", "spin", 148, 32768, 2.0),
          ("gap", "periodic", "spin", 148, 32768, 8.0), ("fma", "periodic", "fma", 148, 32768, 1.0),
          ("rate", "periodic", "spin", 74, 16384, 0.0), ("free-rate", "free", "spin", 148, 32768, 0.0),
          ("free-gap", "free", "spin", 148, 32768, 4.0), ("isolated", "isolated", "spin", 148, 16384, 0.0),
          ("isolated", "isolated", "spin", 148, 131072, 0.0)]


def simulated_points(platform, rows=POINTS, scale: float = 1.0) -> pd.DataFrame:
    """A calibration points frame (``hw.calibrate`` columns) from the simulator: T_iss and period of each
    (phase, mode, gap_kind, K, B, G), the measured gap equal to G; ``scale`` multiplies T_iss."""
    from xstage.compare.bursts import SIM_MODE, simulate_experiment

    out = []
    for phase, mode, gap_kind, K, B, G in rows:
        s = simulate_experiment(platform, SIM_MODE[mode], K, B, G, 16)
        out.append({"phase": phase, "target": platform.target, "mode": mode, "gap_kind": gap_kind, "producers": K,
                    "bytes_per_producer": B, "volume(bytes)": K * B, "gap(us)": G, "fma_iters": 0,
                    "T_iss(us)": s["simulated_issue(us)"] * scale, "period(us)": s["simulated_period(us)"],
                    "gap_measured(us)": G, "trials": 1})
    return pd.DataFrame(out)


def write_measured_like(folder: Path, *, points: bool = False) -> Path:
    """Records for every measured branch; ``points``: also a calibration points.parquet (which the
    calibration page then prefers to the burst records beside it)."""
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
    if points:
        save_records(folder / "calibration" / "paper-b200" / "points.parquet", "point",
                     simulated_points(p, scale=1.03), {**meta, "platform": "paper-b200"})
    # a calibration folder with a recorded split, for the held-out page: every other lockstep pair held out
    split = simulated_points(p, scale=1.03)
    pairs = sorted({(k, b) for k, b in zip(split["producers"], split["bytes_per_producer"])})
    held = set(pairs[::2])
    split["split"] = ["heldout" if (k, b) in held else "fit" for k, b in zip(split["producers"],
                                                                              split["bytes_per_producer"])]
    extra = folder / "calibration-extra" / "paper-b200-split"
    save_records(extra / "points.parquet", "point", split, {**meta, "platform": "paper-b200"})
    save_platform(p, extra / "platform.json")

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
