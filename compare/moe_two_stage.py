"""The two-stage MoE law in the replay, and how well a replay names and sizes the measured speedups.

The law (``benchmarks/moe_stage_grid_heldout.py``, docs/calibration.md "MoE: the two-stage law"): each SM's
remote bytes leave it at most at ``r_sm`` (the platform's producer rate, no fixed issue part) into a shared
buffer of ``Q_eff`` drained at the configuration's measured Combine-copy rate; the SM's next mainloop waits
for its bytes (staging_slots = 1, as the Triton kernel) and the remote epilogue has no fixed part. With
``per_sm`` the programs of one SM share its rate (a 264-program schedule on 132 SMs: r_sm / 2 each). Optional,
off by default (the recorded law): ``epilogue_fixed`` keeps the measured local-store L2 span as the remote
epilogue's fixed part before the bytes leave; ``cover_us`` lets the next mainloop run that long before the
SM's bytes have left (``ReplayConfig.cover_us``: a prefetch window).

``resimulate_law`` fills ``sim_two_stage_wave(us)`` / ``sim_two_stage_int(us)`` beside today's one-stage
replay (``moe_records.resimulate``); ``speedup_errors`` gives the speedup error in percentage points and the
schedule naming over configurations whose orders differ, for any replay column pair, and, given each
configuration's timing spread (``timing_spread``: the larger of the two schedules' interquartile range /
median), the naming over those of them whose measured margin |speedup - 1| exceeds that spread (a tie within
the spread has no winner a replay of medians could name). ``adopted_law`` reads the
law that a held-out record adopted (``data/predictions/moe-law-heldout-*.json``, ``adopted`` true: better than
the one-stage replay on held-out data), with the record's name as provenance.
"""

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.errors import InputError

LAW_RECORDS = "moe-law-heldout-*.json"   # under the data folder's predictions/


@dataclass(frozen=True)
class TwoStageLaw:
    r_sm_GBps: float
    q_eff_MiB: float
    per_sm: bool = True      # the programs of one SM share r_sm
    epilogue_fixed: bool = False  # keep the measured local-store L2 span as the remote epilogue's fixed part
    cover_us: float = 0.0    # the next mainloop may run this long before the SM's bytes left (a prefetch window)
    source: str = ""         # the record that fitted it
    platform: str = ""       # the platform its records ran on ("": any)

    def __post_init__(self):
        for name in ("r_sm_GBps", "q_eff_MiB"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InputError(name, v, "must be a finite number > 0")
        if not (isinstance(self.cover_us, (int, float)) and math.isfinite(self.cover_us) and self.cover_us >= 0):
            raise InputError("cover_us", self.cover_us, "must be a finite number >= 0")


def law_platform(platform, law: TwoStageLaw, drain_GBps: float | None = None, programs_per_sm: int = 1):
    """``platform`` as the law sees it: producer rate r_sm (shared by an SM's programs when ``per_sm``),
    no fixed issue part, every Q(K) = Q_eff, R = ``drain_GBps`` (the Combine copy's rate) when given."""
    rate = law.r_sm_GBps / (max(int(programs_per_sm), 1) if law.per_sm else 1)
    out = replace(platform, producer_issue_GBps=rate, t_fixed_us=0.0,
                  capacity_points=tuple((k, law.q_eff_MiB * 2**20) for k, _ in platform.capacity_points))
    if drain_GBps is not None and np.isfinite(drain_GBps) and drain_GBps > 0:
        out = replace(out, drain_rate_GBps=float(drain_GBps))
    return out


def programs_per_sm(row, platform) -> int:
    v = row.get("programs_per_sm") if hasattr(row, "get") else None
    if v is not None and pd.notna(v):
        return int(v)
    return max(1, -(-int(row["num_sms"]) // platform.sm_count))


def resimulate_law(kernel: pd.DataFrame, platform, law: TwoStageLaw, prefix: str = "sim_two_stage") -> pd.DataFrame:
    """``kernel`` with ``{prefix}_wave(us)`` / ``{prefix}_int(us)``: both schedules replayed under ``law`` from
    the stored measured medians, layouts, leads and ``group_rows`` (as ``moe_records.resimulate``)."""
    from xstage.compare.moe_records import balanced, replay_inputs, rows_of, simulate
    from xstage.sim.schedules import make_moe_schedule

    out = kernel.copy()
    for config, rank, r, lay, sms, groups, timings in replay_inputs(out):
        copy = float(r["combine_copy(GBps)"]) if "combine_copy(GBps)" in r and pd.notna(r["combine_copy(GBps)"]) else None
        plat = law_platform(platform, law, copy, programs_per_sm(r, platform))
        if not law.epilogue_fixed:   # the recorded law: the bytes leave the SM at r_sm, no fixed part
            timings["l2_epilogue_us"] = 0.0
        wave = simulate(lay, make_moe_schedule("expert_wave", lay.grid, sms, group_rows=groups, balance=balanced(r)),
                        timings, plat, cover_us=law.cover_us)
        inter = simulate(lay, make_moe_schedule("interleaved", lay.grid, sms, lead_rows=int(r["lead_rows"]),
                                                group_rows=groups, balance=balanced(r)), timings, plat,
                         cover_us=law.cover_us)
        sel = rows_of(out, config, rank)
        out.loc[sel, f"{prefix}_wave(us)"], out.loc[sel, f"{prefix}_int(us)"] = wave, inter
    return out


def timing_spread(kernel: pd.DataFrame) -> pd.Series:
    """Per configuration: the larger of its expert-wave and interleaved rows' (time_p75 - time_p25) / time
    (every rank's rows; NaN where the records hold no quartiles)."""
    sched = kernel[kernel["variant"].isin(["expert_wave", "interleaved"])]
    if not {"time_p25(us)", "time_p75(us)"} <= set(sched.columns):
        return pd.Series(math.nan, index=pd.Index(sched["config"].unique(), name="config"), dtype=float)
    iqr = (sched["time_p75(us)"].astype(float) - sched["time_p25(us)"].astype(float)) / sched["time(us)"].astype(float)
    return iqr.groupby(sched["config"]).max()


def speedup_errors(measured_speedup, replayed_speedup, identical, spread=None) -> dict:
    """Speedup error |replayed - measured| x 100 (percentage points: median, p90, n) and the schedule named
    right over configurations whose two orders differ (``n_distinct``, ``n_names_winner``, fraction); with
    ``spread`` (each configuration's timing spread, NaN unknown) also over those whose measured margin
    |speedup - 1| exceeds it (``n_beyond_spread``, ``n_names_winner_beyond_spread``, fraction)."""
    m, s = np.asarray(measured_speedup, dtype=float), np.asarray(replayed_speedup, dtype=float)
    ident = np.asarray(identical, dtype=bool)
    have = np.isfinite(m) & np.isfinite(s)
    pp = np.abs(s[have] - m[have]) * 100
    dist = have & ~ident
    right = np.sign(s - 1) == np.sign(m - 1)
    agree = right[dist]
    out = {"n": int(have.sum()), "median_pp": float(np.median(pp)) if len(pp) else math.nan,
           "p90_pp": float(np.percentile(pp, 90)) if len(pp) else math.nan,
           "n_distinct": int(dist.sum()), "n_names_winner": int(agree.sum()),
           "names_winner": float(agree.mean()) if dist.any() else math.nan}
    if spread is not None:
        sp = np.asarray(spread, dtype=float)
        beyond = dist & np.isfinite(sp) & (np.abs(m - 1) > sp)
        out.update({"n_beyond_spread": int(beyond.sum()), "n_names_winner_beyond_spread": int(right[beyond].sum()),
                    "names_winner_beyond_spread": float(right[beyond].mean()) if beyond.any() else math.nan})
    return out


def adopted_law(data_dir: Path) -> TwoStageLaw | None:
    """The law of the newest ``moe-law-heldout-*.json`` under ``data_dir/predictions`` whose ``adopted`` is true
    (None when there is none); ``source`` names the record."""
    folder = Path(data_dir) / "predictions"
    for path in sorted(folder.glob(LAW_RECORDS), reverse=True):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            raise InputError("law record", str(path), "is not readable JSON") from None
        if not rec.get("adopted"):
            continue
        f = rec.get("fitted") or {}
        try:
            return TwoStageLaw(float(f["r_sm_GBps"]), float(f["Q_eff_MiB"]), bool(f.get("per_sm", True)),
                               bool(f.get("epilogue_fixed", False)), float(f.get("cover_us", 0.0)),
                               source=f"{folder.name}/{path.name}", platform=str(rec.get("platform", "")))
        except (KeyError, TypeError, ValueError):
            raise InputError("law record", str(path), "has no fitted r_sm_GBps / Q_eff_MiB") from None
    return None


def law_summary(kernel: pd.DataFrame, c: pd.DataFrame, platform, data_root: Path) -> dict:
    """``xstage results moe`` keys beside today's: the one-stage replay's speedup error (``c``: ``per_config``
    with ``sim_speedup``) and, where a held-out record adopted a law (``adopted_law``), the same figures and
    the schedule naming under that law (rows of the law's platform only), with the record that fitted it;
    ``*_beyond_spread``: the naming over the configurations whose orders differ and whose measured margin
    exceeds their timing spread (``timing_spread``), beside the naming over all of them."""
    out = {}
    if "sim_speedup" in c:
        e = speedup_errors(c["speedup_interleaved"], c["sim_speedup"], c["schedules_identical"],
                           timing_spread(kernel).reindex(c["config"]).to_numpy())
        if e["n"]:
            out.update({"median_speedup_error_pp": e["median_pp"], "p90_speedup_error_pp": e["p90_pp"],
                        "n_beyond_spread_with_sim": e["n_beyond_spread"],
                        "sign_agreement_with_sim_beyond_spread": e["names_winner_beyond_spread"]})
    law = adopted_law(data_root) if platform is not None else None
    if law is None:
        return out
    if law.platform and "platform" in kernel:  # the law holds for the platform its records ran on
        kernel = kernel[kernel["platform"] == law.platform]
    spread = timing_spread(kernel).reindex(c["config"]).to_numpy()
    k = resimulate_law(kernel, platform, law)
    if "sim_two_stage_wave(us)" not in k:
        return out
    from xstage.compare.moe_records import collapse_ranks

    k = collapse_ranks(k[k["variant"] == "interleaved"])
    rep = k.drop_duplicates("config", keep="last").set_index("config")
    sim = (rep["sim_two_stage_wave(us)"] / rep["sim_two_stage_int(us)"]).reindex(c["config"]).to_numpy()
    e = speedup_errors(c["speedup_interleaved"], sim, c["schedules_identical"], spread)
    out.update({"median_speedup_error_pp_two_stage": e["median_pp"], "p90_speedup_error_pp_two_stage": e["p90_pp"],
                "n_distinct_two_stage": e["n_distinct"], "sim_two_stage_names_winner": e["n_names_winner"],
                "sign_agreement_two_stage": e["names_winner"],
                "n_beyond_spread_two_stage": e["n_beyond_spread"],
                "sim_two_stage_names_winner_beyond_spread": e["n_names_winner_beyond_spread"],
                "sign_agreement_two_stage_beyond_spread": e["names_winner_beyond_spread"],
                "two_stage_law_record": law.source,
                "two_stage_law_r_sm_GBps": law.r_sm_GBps, "two_stage_law_Q_eff_MiB": law.q_eff_MiB,
                "two_stage_law_per_sm": law.per_sm, "two_stage_law_epilogue_fixed": law.epilogue_fixed,
                "two_stage_law_cover_us": law.cover_us})
    return out
