"""The MoE keys of the fourth rule and of the third held-out sweep (``xstage results moe``, new keys only).

``hw/moe/bench.py --sweep heldout3`` (``hw/moe/sweep_heldout3.py``) measures bf16 configurations no sweep, law or
rule had seen, with the four rules' predictions committed before it ran
(``data/predictions/moe-rule4-preregistered.json``). Its rows (``sweep == "heldout3"``) stay out of every earlier
key (``split_heldout3``) and give ``heldout3_*``: the configuration count and geomean speedup, and per rule
(``one_stage``, ``two_stage``, ``rule3``, ``rule4``) the speedup error median / p90 (pp) and the schedule named
over the configurations whose orders differ. ``rule4_*`` are the fourth rule's figures on the earlier rows: its
fit (``rule4_main_bf16_*``: the main sweep's bf16 rows hold the fit run), the first held-out sweep
(``heldout_bf16_rule4_*``) and the second (``heldout2_*_rule4``; post hoc: its misses motivated the rule).
"""

import numpy as np
import pandas as pd

from xstage.compare.moe_heldout import HELDOUT
from xstage.compare.moe_heldout2 import _errors

HELDOUT3 = "heldout3"


def split_heldout3(kernel: pd.DataFrame) -> tuple:
    """(rows of the earlier sweeps, rows of ``--sweep heldout3``)."""
    if "sweep" not in kernel:
        return kernel, kernel.iloc[0:0]
    fresh = kernel["sweep"] == HELDOUT3
    return kernel[~fresh], kernel[fresh]


def _speedups(frames, data_root, loader, fn) -> tuple:
    from xstage.sim.platform import load_platform

    rule = loader(data_root)
    if rule is None:
        return None, pd.Series(dtype=float)
    frames = [f for f in frames if not f.empty]
    if not frames:
        return rule, pd.Series(dtype=float)
    both = pd.concat(frames)
    if rule.platform and "platform" in both:
        both = both[both["platform"] == rule.platform]
    plat = load_platform(rule.platform or "h200-pcie-host")
    return rule, (fn(both, plat, rule) if not both.empty else pd.Series(dtype=float))


def _put(out: dict, tag: str, e: dict) -> None:
    if e.get("n"):
        out.update({f"{tag}_n_configs": e["n"], f"{tag}_median_speedup_error_pp": e["median_pp"],
                    f"{tag}_p90_speedup_error_pp": e["p90_pp"], f"{tag}_names_winner": e["n_names_winner"],
                    f"{tag}_n_distinct": e["n_distinct"]})


def heldout3_summary(earlier: pd.DataFrame, fresh2: pd.DataFrame, fresh3: pd.DataFrame, summarize_rows,
                     data_root) -> dict:
    """``rule4_*`` / ``heldout2_*_rule4`` (with the rule-4 record) and ``heldout3_*`` (with heldout3 rows)."""
    from xstage.compare.moe_rule3 import load_rule3, rule3_speedups
    from xstage.compare.moe_rule4 import load_rule4, rule4_speedups

    out = {}
    rule4, s4 = _speedups((earlier, fresh2, fresh3), data_root, load_rule4, rule4_speedups)
    if rule4 is not None:
        out.update({"rule4_record": rule4.source, "rule4_r_sm_GBps": rule4.r_sm_GBps,
                    "rule4_Q_eff_MiB": rule4.q_eff_MiB, "rule4_cover_frac": rule4.cover_frac,
                    "rule4_drain": "platform"})
        sweep = earlier["sweep"] if "sweep" in earlier else pd.Series("main", index=earlier.index)
        prec = earlier["precision"] if "precision" in earlier else pd.Series("bf16", index=earlier.index)
        for tag, rows in (("rule4_main_bf16", earlier[(sweep != HELDOUT) & (prec == "bf16")]),
                          ("heldout_bf16_rule4", earlier[(sweep == HELDOUT) & (prec == "bf16")])):
            _put(out, tag, _errors(rows[rows["config"].isin(s4.index)], s4))
        e = _errors(fresh2[fresh2["config"].isin(s4.index)], s4) if not fresh2.empty else {}
        if e.get("n"):
            out.update({"heldout2_median_speedup_error_pp_rule4": e["median_pp"],
                        "heldout2_p90_speedup_error_pp_rule4": e["p90_pp"],
                        "heldout2_names_winner_rule4": e["n_names_winner"],
                        "heldout2_n_distinct_rule4": e["n_distinct"]})
    if fresh3.empty:
        return _floats(out)
    part = summarize_rows(fresh3)
    out.update({"heldout3_n_configs": part["n_configs"],
                "heldout3_geomean_speedup_interleaved": part["geomean_speedup_interleaved"],
                "heldout3_n_identical_schedules": part["n_identical_schedules"]})
    for rule, med, p90, named, distinct in (("one_stage", "median_speedup_error_pp", "p90_speedup_error_pp",
                                             "n_sim_names_winner", "n_distinct_with_sim"),
                                            ("two_stage", "median_speedup_error_pp_two_stage",
                                             "p90_speedup_error_pp_two_stage", "sim_two_stage_names_winner",
                                             "n_distinct_two_stage")):
        if med in part:
            out.update({f"heldout3_median_speedup_error_pp_{rule}": part[med],
                        f"heldout3_p90_speedup_error_pp_{rule}": part.get(p90),
                        f"heldout3_names_winner_{rule}": part.get(named),
                        f"heldout3_n_distinct_{rule}": part.get(distinct)})
    _r3, s3 = _speedups((fresh3,), data_root, load_rule3, rule3_speedups)
    for rule, s in (("rule3", s3), ("rule4", s4)):
        e = _errors(fresh3[fresh3["config"].isin(s.index)], s)
        if e.get("n"):
            out.update({f"heldout3_median_speedup_error_pp_{rule}": e["median_pp"],
                        f"heldout3_p90_speedup_error_pp_{rule}": e["p90_pp"],
                        f"heldout3_names_winner_{rule}": e["n_names_winner"],
                        f"heldout3_n_distinct_{rule}": e["n_distinct"]})
    return _floats(out)


def _floats(out: dict) -> dict:
    return {k: (float(v) if isinstance(v, np.floating) else v) for k, v in out.items()}
