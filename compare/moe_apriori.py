"""MoE replays of configurations before they run: per-tile medians predicted from fit records.

The replays (``moe_records.resimulate``, ``moe_two_stage.resimulate_law``, ``moe_rule3.resimulate_rule3``) take each
configuration's measured per-tile medians (``measured_l1(us)`` ...), its tuned lead D and its Combine-copy rate from
its own run. To fix a prediction before a run, ``TileModel`` predicts those inputs from fit records of the same
kernel: per kernel class (programs per SM: 1 = long K, BLOCK_N 256; 2 = short K, BLOCK_N 128) the mainloop medians
are linear in the tile's K (Linear 1: hidden; Linear 2: intermediate), least squares over the fit rows; the
epilogue medians and the copy rate are the class's medians. ``apriori_row`` builds the kernel-record row a replay
reads (num_sms, group_rows, balance, lead_rows, measured medians, copy rate) for a configuration not yet measured;
``candidate_leads`` are the leads the bench's ``tune_lead`` will choose among (D_knee x {1, 2, 4, 8}, capped), whose
replays a prediction averages (the pick is made on local-store times that differ by ~1 %).
"""

from dataclasses import dataclass

import numpy as np
import pandas as pd

from xstage.errors import InputError
from xstage.records.moe import measured

KEYS = ("l1_us", "l2_us", "l1_epilogue_us", "l2_epilogue_us")


@dataclass(frozen=True)
class ClassFit:
    l1: tuple            # (intercept us, us per K element), K = hidden
    l2: tuple            # (intercept us, us per K element), K = intermediate
    l1_epilogue_us: float
    l2_epilogue_us: float
    copy_GBps: float
    group_rows: int
    block_n: int
    n_rows: int


@dataclass(frozen=True)
class TileModel:
    classes: dict        # programs per SM -> ClassFit
    sm_count: int

    def as_dict(self) -> dict:
        return {str(k): vars(v) for k, v in self.classes.items()} | {"sm_count": self.sm_count}


def _line(x, y) -> tuple:
    a = np.vstack([np.ones_like(x), x]).T
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    return float(coef[0]), float(coef[1])


def fit_tile_model(kernel: pd.DataFrame, sm_count: int) -> TileModel:
    """Per programs-per-SM class of ``kernel``'s interleaved rows (one per configuration): the lines and medians."""
    rows = kernel[kernel["variant"] == "interleaved"].drop_duplicates("config", keep="last")
    need = [measured(k) for k in KEYS] + ["programs_per_sm", "hidden", "intermediate", "combine_copy(GBps)"]
    missing = [c for c in need if c not in rows]
    if missing or rows.empty:
        raise InputError("fit records", missing or "no rows", "need the measured per-tile medians and copy rate")
    out = {}
    for pps, g in rows.groupby("programs_per_sm"):
        out[int(pps)] = ClassFit(_line(g["hidden"].to_numpy(float), g[measured("l1_us")].to_numpy(float)),
                                 _line(g["intermediate"].to_numpy(float), g[measured("l2_us")].to_numpy(float)),
                                 float(g[measured("l1_epilogue_us")].median()),
                                 float(g[measured("l2_epilogue_us")].median()),
                                 float(g["combine_copy(GBps)"].median()), int(g["group_rows"].median()),
                                 int(g["block_n"].median()), int(len(g)))
    return TileModel(out, int(sm_count))


def candidate_leads(problem, sms: int) -> list:
    """The leads ``hw.moe.setup.tune_lead`` chooses among: D_knee x {1, 2, 4, 8}, capped at rows - 1."""
    from xstage.sim.model import lead_knee_rows
    from xstage.sim.workloads.moe_layout import dispatch_layout

    knee = max(1, lead_knee_rows(problem.block_n, sms, problem.intermediate))
    rows = dispatch_layout(problem).grid.rows
    return sorted({min(max(1, knee * f), max(1, rows - 1)) for f in (1, 2, 4, 8)})


def apriori_row(model: TileModel, hidden: int, intermediate: int, tokens: int, experts: int, routing: str,
                short_k_max: int, balance_short: bool, world_size: int = 8) -> tuple:
    """(MoeProblem, row dict as a kernel record holds it, the candidate leads) of a bf16 configuration."""
    from xstage.sim.workloads.moe_layout import MoeProblem

    pps = 2 if intermediate <= short_k_max else 1
    if pps not in model.classes:
        raise InputError("programs_per_sm", pps, f"has no fit rows (classes {sorted(model.classes)})")
    c = model.classes[pps]
    problem = MoeProblem(hidden, intermediate, tokens, local_experts=experts, routing=routing, precision="bf16",
                         world_size=world_size, block_n=c.block_n)
    sms = model.sm_count * pps
    row = {"num_sms": sms, "programs_per_sm": pps, "group_rows": c.group_rows,
           "balance": bool(balance_short and pps == 2), "combine_copy(GBps)": c.copy_GBps,
           measured("l1_us"): c.l1[0] + c.l1[1] * hidden, measured("l2_us"): c.l2[0] + c.l2[1] * intermediate,
           measured("l1_epilogue_us"): c.l1_epilogue_us, measured("l2_epilogue_us"): c.l2_epilogue_us}
    return problem, row, candidate_leads(problem, sms)


def timings_of(row: dict) -> dict:
    """The replay's ``timings`` from a row's measured medians."""
    return {k: float(row[measured(k)]) for k in KEYS}
