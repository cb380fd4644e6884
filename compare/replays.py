"""Simulated tile records of the paper's fused kernels, built exactly as ``xstage.sim.sweep`` builds them
(same workload, schedules, lead D and replay settings; ``run_moe_config`` / ``run_fa_config`` keep only
their summaries, these keep every tile).

``simulate_moe_tiles`` replays one MoE configuration with both schedules (expert-wave and
interleaved with D = max(1, D_knee)), ``simulate_fa_tiles`` one FlashAttention shape and sequence
length (FA-only, X-Stage-fused, completion-coupled). Both return tile records (the "tile" schema)
and the replay's X-Stage occupancy log, with a ``schedule`` column.
"""

import pandas as pd

from xstage.sim.platform import Platform
from xstage.sim.replay import replay
from xstage.sim.sweep import fa_replays, moe_replay_config
from xstage.sim.workloads.catalog import moe_workload, parse_config

SCHEDULES = ("expert_wave", "interleaved")


def simulate_moe_tiles(name: str, platform: Platform, *, num_sms: int | None = None, staging_slots: int = 2,
                       lead_rows: int | None = None, overrides: dict | None = None,
                       experiment: str = "moe") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tile records and queue occupancy of one MoE configuration under both schedules."""
    cfg = parse_config(name) if isinstance(name, str) else name
    sms = num_sms or platform.sm_count - platform.sm_count % 2   # CTA pairs, as run_moe_config
    w = moe_workload(cfg, platform, num_sms=sms, mainloop_override_us=overrides)
    D = max(1, w.lead_knee_rows) if lead_rows is None else lead_rows
    rc = moe_replay_config(w, staging_slots=staging_slots, record_occupancy=True)
    tiles, occ = [], []
    for kind in SCHEDULES:
        s = w.schedule(kind, sms, lead_rows=D)
        r = replay(s, w.mainloop_us(s), w.remote_bytes(s), platform, rc)
        tiles.append(r.tiles(experiment=experiment, config=cfg.name))
        occ.append(r.occupancy.assign(schedule=r.schedule, config=cfg.name))
    return pd.concat(tiles, ignore_index=True), pd.concat(occ, ignore_index=True)


def simulate_fa_tiles(shape: str, seq_len: int, platform: Platform, *, heads: int | None = None,
                      num_sms: int | None = None, latency_us: float | None = None,
                      remote_fraction: float = 1.0, experiment: str = "attention") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tile records of FA-only, fused and completion-coupled replays of one shape (``sweep.fa_replays``).

    ``remote_fraction`` scales every tile's bytes (e.g. (W - 1) / W when the self chunk stays local)."""
    *_, runs, _lat, _K = fa_replays(shape, seq_len, platform, heads=heads, num_sms=num_sms, latency_us=latency_us,
                                    remote_fraction=remote_fraction, record_occupancy=True)
    tiles, occ = [], []
    label = f"{shape}/M={seq_len}"
    for variant, r in runs.items():
        t = r.tiles(experiment=experiment, config=label)
        t["schedule"] = variant
        t["M"] = seq_len
        tiles.append(t)
        occ.append(r.occupancy.assign(schedule=variant, config=label))
    return pd.concat(tiles, ignore_index=True), pd.concat(occ, ignore_index=True)
