"""The third MoE rule: the two-stage replay with the kernel's own drain and a per-SM rate fitted on the Gluon kernel.

What the fit records show (``data/moe/run-d4c3a13-gluon``; docs/calibration.md "MoE: a third rule"):
  - per-tile terms (tile-log samples): the mainloop after a tile that stored remotely stretches until that SM's
    bytes have left (Linear-2 after Linear-2: 80-120 us against 14 us with local stores, 264 programs; 53-67 us
    against 25 us at 132 SMs), while a mainloop after a local tile is barely slowed by other SMs' stores (Linear 1:
    14.4-14.5 us either way; Linear 2 after Linear 1: 28.8-30 us against 25.5-26.3 us local). The stall sits on the
    storing SM, as the replay's one staging slot puts it; the remote epilogue itself is 2-5 us.
  - the per-SM rate: the adopted two-stage law (each SM's bytes leave at most at r_sm = 0.5 GB/s into Q_eff =
    0.2 MiB) under-predicts the Gluon long-K kernel's speedups by 4.4 pp (median), with r_sm = 0.75 it
    over-predicts by 1.4 pp: at 132 x 0.5 = 66 GB/s against R = 52.8 GB/s an SM that stores while few others do
    is held at 0.5 GB/s, so the interleaved order, where few SMs store at once, gains too little.
  - the drain: the adopted law drains at the configuration's Combine-copy rate; on 500-700 MB buffers the copy
    engine reaches only 28-43 GB/s while the kernel's own stores keep their usual whole-kernel rate, so the
    copy rate is not the kernel's drain (on the fit run, every copy rate is 52.1-52.6 GB/s: the choice is
    neutral there).
The rule (``Rule3``): ``moe_two_stage``'s replay (per-SM sharing of r_sm, no fixed issue part, Q(K) = Q_eff,
staging_slots = 1) with the drain at the platform's R instead of the copy rate and r_sm, Q_eff fitted on the
Gluon fit run (``benchmarks/moe_rule3.py fit``). Optional, off in the fitted rule: ``pool_GBps`` (the SMs' stores
share one aggregate rate, ``ReplayConfig.sm_pool_GBps``; explored, not adopted: it fits the speedups only with
makespans 1.8x the measured ones) and ``epilogue_fixed`` (as the law's).
``resimulate_rule3`` fills ``sim_rule3_wave(us)`` / ``sim_rule3_int(us)`` from the stored measured medians.
"""

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.compare.moe_two_stage import TwoStageLaw, law_platform, programs_per_sm
from xstage.errors import InputError

RULE3_RECORD = "moe-rule3-fit.json"   # under the data folder's predictions/


@dataclass(frozen=True)
class Rule3:
    r_sm_GBps: float
    q_eff_MiB: float
    epilogue_fixed: bool = False
    pool_GBps: float | None = None   # None: each SM its own rate (the fitted rule)
    source: str = ""        # the record that fitted it
    platform: str = ""      # the platform its records ran on ("": any)

    def __post_init__(self):
        for name in ("r_sm_GBps", "q_eff_MiB", "pool_GBps"):
            v = getattr(self, name)
            if name == "pool_GBps" and v is None:
                continue
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InputError(name, v, "must be a finite number > 0")

    def law(self) -> TwoStageLaw:
        """The two-stage law this rule extends (its per-SM rate, Q_eff and epilogue; per_sm sharing)."""
        return TwoStageLaw(self.r_sm_GBps, self.q_eff_MiB, True, self.epilogue_fixed)


def rule3_replay(layout, schedule, timings: dict, platform, rule: Rule3) -> float:
    """The makespan (us) of ``schedule`` under ``rule`` (``platform``: as ``law_platform`` made it)."""
    from xstage.sim.replay import ReplayConfig, replay

    if schedule.num_sms > platform.sm_count:   # two programs per SM: each program is a producer
        platform = dataclasses.replace(platform, sm_count=schedule.num_sms)
    kind = schedule.tiles[:, 0]
    ml = np.where(kind == 1, timings["l2_us"], timings["l1_us"])
    cfg = ReplayConfig(staging_slots=1, local_epilogue_us=max(timings["l1_epilogue_us"], 0.0),
                       remote_epilogue_us=max(timings["l2_epilogue_us"], 0.0) if rule.epilogue_fixed else 0.0,
                       record_occupancy=False, sm_pool_GBps=rule.pool_GBps)
    return replay(schedule, ml, layout.tile_remote_bytes(schedule.tiles), platform, cfg).makespan_us


def rule3_makespans(layout, row, timings: dict, platform, rule: Rule3, lead_rows: int | None = None) -> tuple:
    """(expert-wave, interleaved) makespans (us) of one configuration: ``row`` holds num_sms, lead_rows,
    group_rows, balance and programs_per_sm as a kernel record does (``lead_rows`` overrides the row's)."""
    from xstage.compare.moe_records import balanced, group_rows
    from xstage.sim.schedules import make_moe_schedule

    plat = law_platform(platform, rule.law(), None, programs_per_sm(row, platform))
    sms, groups, bal = int(row["num_sms"]), group_rows(row), balanced(row)
    lead = int(row["lead_rows"]) if lead_rows is None else int(lead_rows)
    wave = rule3_replay(layout, make_moe_schedule("expert_wave", layout.grid, sms, group_rows=groups, balance=bal),
                        timings, plat, rule)
    inter = rule3_replay(layout, make_moe_schedule("interleaved", layout.grid, sms, lead_rows=lead, group_rows=groups,
                                                   balance=bal), timings, plat, rule)
    return wave, inter


def resimulate_rule3(kernel: pd.DataFrame, platform, rule: Rule3, prefix: str = "sim_rule3") -> pd.DataFrame:
    """``kernel`` with ``{prefix}_wave(us)`` / ``{prefix}_int(us)`` on its schedule rows: both schedules replayed
    under ``rule`` from the stored measured medians and layouts (as ``moe_two_stage.resimulate_law``)."""
    from xstage.compare.moe_records import replay_inputs, rows_of

    out = kernel.copy()
    for config, rank, r, lay, _sms, _groups, timings in replay_inputs(out):
        wave, inter = rule3_makespans(lay, r, timings, platform, rule)
        sel = rows_of(out, config, rank)
        out.loc[sel, f"{prefix}_wave(us)"], out.loc[sel, f"{prefix}_int(us)"] = wave, inter
    return out


def rule3_speedups(kernel: pd.DataFrame, platform, rule: Rule3) -> pd.Series:
    """Per configuration (one row per config, W-rank records: the slowest rank): the rule's replayed speedup
    expert-wave / interleaved."""
    from xstage.compare.moe_records import collapse_ranks

    k = resimulate_rule3(kernel, platform, rule)
    if "sim_rule3_wave(us)" not in k:
        return pd.Series(dtype=float)
    rep = collapse_ranks(k[k["variant"] == "interleaved"]).drop_duplicates("config", keep="last").set_index("config")
    return rep["sim_rule3_wave(us)"] / rep["sim_rule3_int(us)"]


def load_rule3(data_dir: Path) -> Rule3 | None:
    """The rule of ``data_dir/predictions/moe-rule3-fit.json`` (None when absent); ``source`` names the record."""
    path = Path(data_dir) / "predictions" / RULE3_RECORD
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text())
        f = rec["fitted"]
        pool = f.get("pool_GBps")
        return Rule3(float(f["r_sm_GBps"]), float(f["Q_eff_MiB"]), bool(f.get("epilogue_fixed", False)),
                     None if pool is None else float(pool), source=f"predictions/{path.name}",
                     platform=str(rec.get("platform", "")))
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError("rule-3 record", str(path), "is not readable JSON with fitted r_sm_GBps / Q_eff_MiB") from None
