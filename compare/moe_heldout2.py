"""The MoE keys of the second held-out sweep and of the third rule (``xstage results moe``, new keys only).

``hw/moe/bench.py --sweep heldout2`` (``hw/moe/sweep_heldout2.py``) measured bf16 configurations that no sweep, law
or rule had seen; its rules were committed before it ran (``data/predictions/moe-rule3-preregistered.json``). Its
rows (``sweep == "heldout2"``) stay out of the earlier keys (``split_fresh``: those keep the answers they had) and
give ``heldout2_*``: the configuration count and geomean speedup, and per rule (``one_stage``: the bundled replay,
``two_stage``: the adopted law, ``rule3``: ``compare.moe_rule3``) the speedup error median / p90 (pp) and the
schedule named over the configurations whose orders differ. ``rule3_*`` / ``heldout_*_rule3`` are the third rule's
figures on the earlier rows: the main sweep (``rule3_main_*``; its bf16 rows hold the fit run) and the first
held-out sweep (``heldout_*_rule3``, the rows of the ``heldout_*`` keys; post hoc: the rule's drain was chosen
knowing those runs, nothing was fitted on them).
"""

import math

import numpy as np
import pandas as pd

from xstage.compare.moe_heldout import HELDOUT

HELDOUT2 = "heldout2"


def split_fresh(kernel: pd.DataFrame) -> tuple:
    """(rows of the earlier sweeps, rows of ``--sweep heldout2``)."""
    if "sweep" not in kernel:
        return kernel, kernel.iloc[0:0]
    fresh = kernel["sweep"] == HELDOUT2
    return kernel[~fresh], kernel[fresh]


def _errors(part: pd.DataFrame, rule_speedup: pd.Series) -> dict:
    """The rule's speedup errors over ``part``'s configurations (``per_config`` rows)."""
    from xstage.compare.moe_records import per_config
    from xstage.compare.moe_two_stage import speedup_errors, timing_spread

    if part.empty:
        return {}
    c = per_config(part)
    return speedup_errors(c["speedup_interleaved"], rule_speedup.reindex(c["config"]).to_numpy(),
                          c["schedules_identical"], timing_spread(part).reindex(c["config"]).to_numpy())


def rule3_keys(earlier: pd.DataFrame, fresh: pd.DataFrame, data_root) -> tuple:
    """(the rule's speedup per configuration of both frames, the ``rule3_*`` / ``heldout_*_rule3`` keys); the
    rule of ``data_root``'s ``predictions/moe-rule3-fit.json`` on the rows of its platform ({} without it)."""
    from xstage.compare.moe_rule3 import load_rule3, rule3_speedups
    from xstage.sim.platform import load_platform

    rule = load_rule3(data_root)
    if rule is None:
        return pd.Series(dtype=float), {}
    plat = load_platform(rule.platform or "h200-pcie-host")
    frames = [f for f in (earlier, fresh) if not f.empty]
    both = pd.concat(frames) if frames else earlier
    if rule.platform and "platform" in both:
        both = both[both["platform"] == rule.platform]
    speed = rule3_speedups(both, plat, rule) if not both.empty else pd.Series(dtype=float)
    out = {"rule3_record": rule.source, "rule3_r_sm_GBps": rule.r_sm_GBps, "rule3_Q_eff_MiB": rule.q_eff_MiB,
           "rule3_drain": "platform"}
    sweep = earlier["sweep"] if "sweep" in earlier else pd.Series("main", index=earlier.index)
    prec = earlier["precision"] if "precision" in earlier else pd.Series("bf16", index=earlier.index)
    for tag, rows in (("rule3_main", earlier[sweep != HELDOUT]),
                      ("rule3_main_bf16", earlier[(sweep != HELDOUT) & (prec == "bf16")]),
                      ("heldout_rule3", earlier[sweep == HELDOUT]),
                      ("heldout_bf16_rule3", earlier[(sweep == HELDOUT) & (prec == "bf16")])):
        e = _errors(rows[rows["config"].isin(speed.index)], speed)
        if e.get("n"):
            out.update({f"{tag}_n_configs": e["n"], f"{tag}_median_speedup_error_pp": e["median_pp"],
                        f"{tag}_p90_speedup_error_pp": e["p90_pp"], f"{tag}_names_winner": e["n_names_winner"],
                        f"{tag}_n_distinct": e["n_distinct"]})
    return speed, out


def heldout2_summary(earlier: pd.DataFrame, fresh: pd.DataFrame, summarize_rows, data_root) -> dict:
    """``heldout2_*`` (empty without ``heldout2`` rows) and the third rule's keys on every sweep."""
    speed, out = rule3_keys(earlier, fresh, data_root)
    if fresh.empty:
        return out
    part = summarize_rows(fresh)
    out.update({"heldout2_n_configs": part["n_configs"],
                "heldout2_geomean_speedup_interleaved": part["geomean_speedup_interleaved"],
                "heldout2_min_speedup_interleaved": part["min_speedup_interleaved"],
                "heldout2_max_speedup_interleaved": part["max_speedup_interleaved"],
                "heldout2_n_identical_schedules": part["n_identical_schedules"]})
    pairs = (("one_stage", "median_speedup_error_pp", "p90_speedup_error_pp", "n_sim_names_winner",
              "n_distinct_with_sim"),
             ("two_stage", "median_speedup_error_pp_two_stage", "p90_speedup_error_pp_two_stage",
              "sim_two_stage_names_winner", "n_distinct_two_stage"))
    for rule, med, p90, named, distinct in pairs:
        out.update({f"heldout2_median_speedup_error_pp_{rule}": part.get(med, math.nan),
                    f"heldout2_p90_speedup_error_pp_{rule}": part.get(p90, math.nan),
                    f"heldout2_names_winner_{rule}": part.get(named),
                    f"heldout2_n_distinct_{rule}": part.get(distinct)})
    e = _errors(fresh[fresh["config"].isin(speed.index)], speed)
    if e.get("n"):
        out.update({"heldout2_median_speedup_error_pp_rule3": e["median_pp"],
                    "heldout2_p90_speedup_error_pp_rule3": e["p90_pp"],
                    "heldout2_names_winner_rule3": e["n_names_winner"], "heldout2_n_distinct_rule3": e["n_distinct"]})
    return {k: (float(v) if isinstance(v, (np.floating,)) else v) for k, v in out.items()}
