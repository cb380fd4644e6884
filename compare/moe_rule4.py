"""The fourth MoE rule: rule 3 with the next mainloop overlapping the previous tile's store.

What the fit records show (``data/moe/run-d4c3a13-gluon``; docs/calibration.md "MoE: a fourth rule"):
  - rule 3's interleaved makespans are too long where the local FFN is about half of the fused time or more
    (compute-heavy long-K rows: h4096-i3072-t27904 replayed 7-8 % too long against expert-wave 1-2 %; speedup
    -7.3 / -5.6 pp), while the drain-bound rows (local FFN ~30 % of the fused time) replay within 1-3 %.
  - with one staging slot the replay puts each remote store's whole per-SM time (B / r_sm, ~109 us for a 64 KiB
    tile at 0.6 GB/s) in series with the SM's next mainloop. Interleaved, where few SMs store at once, each
    SM's makespan is then about its local work plus its bytes / r_sm; the measured interleaved kernels sit below
    that sum (h4096-i3072-t27904: 5180 us against a local 2883 us plus 2517 us of per-SM store time and the
    replay's 5600 us). The tile samples (short K, two programs per SM) show the stall where the replay puts it
    -- in the mainloop after a remote store -- but they cannot say how much of that mainloop's own work
    proceeds while the bytes leave (its base 14 us is short against the 100 us store).
The rule (``Rule4``): ``rule3_replay`` with every tile's mainloop allowed to run ``cover_frac`` of itself before it
needs its staging slot (``replay``'s ``cover_per_tile_us``): the store's per-SM time overlaps that share of the
next mainloop. r_sm, Q_eff and cover_frac fitted on the fit run (``benchmarks/moe_rule4.py fit``); the drain at
the platform's R as rule 3's.
"""

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.compare.moe_rule3 import Rule3
from xstage.compare.moe_two_stage import law_platform, programs_per_sm
from xstage.errors import InputError

RULE4_RECORD = "moe-rule4-fit.json"   # under the data folder's predictions/


@dataclass(frozen=True)
class Rule4:
    r_sm_GBps: float
    q_eff_MiB: float
    cover_frac: float        # share of each mainloop that may run before the previous store's slot is free
    source: str = ""
    platform: str = ""

    def __post_init__(self):
        Rule3(self.r_sm_GBps, self.q_eff_MiB)   # the same checks as rule 3's
        f = self.cover_frac
        if not (isinstance(f, (int, float)) and math.isfinite(f) and 0 <= f <= 1):
            raise InputError("cover_frac", f, "must be a number in [0, 1]")

    def rule3(self) -> Rule3:
        return Rule3(self.r_sm_GBps, self.q_eff_MiB)


def rule4_replay(layout, schedule, timings: dict, platform, rule: Rule4) -> float:
    """The makespan (us) of ``schedule`` under ``rule`` (``platform``: as ``law_platform`` made it)."""
    from xstage.sim.replay import ReplayConfig, replay

    if schedule.num_sms > platform.sm_count:
        platform = dataclasses.replace(platform, sm_count=schedule.num_sms)
    kind = schedule.tiles[:, 0]
    ml = np.where(kind == 1, timings["l2_us"], timings["l1_us"])
    cfg = ReplayConfig(staging_slots=1, local_epilogue_us=max(timings["l1_epilogue_us"], 0.0),
                       remote_epilogue_us=0.0, record_occupancy=False)
    cover = np.where(kind == 1, 0.0, rule.cover_frac * ml) if rule.cover_frac > 0 else None   # L1 tiles only
    return replay(schedule, ml, layout.tile_remote_bytes(schedule.tiles), platform, cfg,
                  cover_per_tile_us=cover).makespan_us


def rule4_makespans(layout, row, timings: dict, platform, rule: Rule4, lead_rows: int | None = None) -> tuple:
    """(expert-wave, interleaved) makespans (us) of one configuration (``row`` as ``rule3_makespans`` reads it)."""
    from xstage.compare.moe_records import balanced, group_rows
    from xstage.sim.schedules import make_moe_schedule

    plat = law_platform(platform, rule.rule3().law(), None, programs_per_sm(row, platform))
    sms, groups, bal = int(row["num_sms"]), group_rows(row), balanced(row)
    lead = int(row["lead_rows"]) if lead_rows is None else int(lead_rows)
    wave = rule4_replay(layout, make_moe_schedule("expert_wave", layout.grid, sms, group_rows=groups, balance=bal),
                        timings, plat, rule)
    inter = rule4_replay(layout, make_moe_schedule("interleaved", layout.grid, sms, lead_rows=lead, group_rows=groups,
                                                   balance=bal), timings, plat, rule)
    return wave, inter


def resimulate_rule4(kernel: pd.DataFrame, platform, rule: Rule4, prefix: str = "sim_rule4") -> pd.DataFrame:
    """``kernel`` with ``{prefix}_wave(us)`` / ``{prefix}_int(us)`` on its schedule rows (as ``resimulate_rule3``)."""
    from xstage.compare.moe_records import replay_inputs, rows_of

    out = kernel.copy()
    for config, rank, r, lay, _sms, _groups, timings in replay_inputs(out):
        wave, inter = rule4_makespans(lay, r, timings, platform, rule)
        sel = rows_of(out, config, rank)
        out.loc[sel, f"{prefix}_wave(us)"], out.loc[sel, f"{prefix}_int(us)"] = wave, inter
    return out


def rule4_speedups(kernel: pd.DataFrame, platform, rule: Rule4) -> pd.Series:
    """Per configuration (W-rank records: the slowest rank): the rule's speedup expert-wave / interleaved."""
    from xstage.compare.moe_records import collapse_ranks

    k = resimulate_rule4(kernel, platform, rule)
    if "sim_rule4_wave(us)" not in k:
        return pd.Series(dtype=float)
    rep = collapse_ranks(k[k["variant"] == "interleaved"]).drop_duplicates("config", keep="last").set_index("config")
    return rep["sim_rule4_wave(us)"] / rep["sim_rule4_int(us)"]


def load_rule4(data_dir: Path) -> Rule4 | None:
    """The rule of ``data_dir/predictions/moe-rule4-fit.json`` (None when absent)."""
    path = Path(data_dir) / "predictions" / RULE4_RECORD
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text())
        f = rec["fitted"]
        return Rule4(float(f["r_sm_GBps"]), float(f["Q_eff_MiB"]), float(f["cover_frac"]),
                     source=f"predictions/{path.name}", platform=str(rec.get("platform", "")))
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError("rule-4 record", str(path), "is not readable JSON with fitted r_sm_GBps / Q_eff_MiB / "
                         "cover_frac") from None
