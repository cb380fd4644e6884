"""MoE speedups (the paper's Fig. 8): interleaved over expert-wave, simulated and measured.

Simulated rows are ``xstage.sim.sweep`` rows (one per configuration, ``speedup`` = wave / int).
Measured rows are kernel records with ``experiment == "moe"`` and variants ``expert_wave`` and
``interleaved`` per ``config``. A catalog name (MODEL/PRECISION/ROUTING/SETTING) is re-run with
``run_moe_config`` on the calibrated platform; a hardware sweep shape (``hw/moe/bench.py`` labels such as
``h7168-i2048-t8192-e8-skewed-bf16-w8-s0``) is not in the catalog: its rows carry the replay that
the benchmark ran for that exact shape and routing (``sim_wave(us)``, ``sim_int(us)``, ``sim_platform``),
which is used instead; records without it are replayed here on the comparison's platform from their own
shape fields and measured tile medians (``moe_records.resimulate``).
"""

import numpy as np
import pandas as pd

from xstage.compare.metrics import add_relative_errors, frame_error_summary, sign_agreement
from xstage.errors import InputError
from xstage.sim.platform import Platform
from xstage.sim.sweep import run_moe_config
from xstage.sim.workloads.catalog import parse_config

WAVE = ("expert_wave", "wave", "expert-wave")
INT = ("interleaved", "int")
QUANTITIES = ["wave(us)", "int(us)", "speedup"]


def quick_sweep(platform: Platform, *, setting: str = "S", precisions=("w8a8", "w4a8"),
                routings=("balanced", "skewed"), models=None, progress=None) -> pd.DataFrame:
    """A small simulated sweep (one setting) for the dashboard when no sweep records exist."""
    from xstage.sim.workloads.catalog import moe_catalog

    names = [f"{m}/{p}/{r}/{setting}" for m in (models or list(moe_catalog()["models"]))
             for p in precisions for r in routings]
    rows = [run_moe_config(n, platform) for n in (progress(names) if progress else names)]
    return pd.DataFrame(rows)


def speedup_groups(sweep: pd.DataFrame) -> pd.DataFrame:
    """Fig. 8 bars: per (model, precision, routing) the geometric mean, min and max speedup over settings."""
    g = sweep.groupby(["model", "precision", "routing"], sort=False)["speedup"]
    out = pd.DataFrame({"configs": g.size(), "geomean_speedup": g.apply(lambda s: float(np.exp(np.log(s).mean()))),
                        "min_speedup": g.min(), "max_speedup": g.max()}).reset_index()
    return out


def measured_speedups(kernel: pd.DataFrame) -> pd.DataFrame:
    """Per config: measured expert-wave and interleaved times and their ratio (W-rank records: each
    variant's slowest rank, as ``xstage results moe`` takes them)."""
    from xstage.compare.moe_records import collapse_ranks

    k = kernel[kernel["experiment"] == "moe"]
    if k.empty:
        raise InputError("kernel records", "experiment", "hold no MoE rows (experiment == 'moe')")
    k = collapse_ranks(k)
    k = k.assign(schedule=np.where(k["variant"].isin(WAVE), "wave", np.where(k["variant"].isin(INT), "int", "")))
    k = k[k["schedule"] != ""]
    p = k.pivot_table(index="config", columns="schedule", values="time(us)", aggfunc="median")
    if not {"wave", "int"} <= set(p.columns):
        raise InputError("MoE kernel records variants", sorted(set(k["variant"])),
                         "must include expert_wave and interleaved for the same configs")
    out = p.reset_index().rename(columns={"wave": "measured_wave(us)", "int": "measured_int(us)"})
    out["measured_speedup"] = out["measured_wave(us)"] / out["measured_int(us)"]
    out = out.dropna()
    if {"sim_wave(us)", "sim_int(us)"} <= set(k.columns):
        sims = k.groupby("config")[["sim_wave(us)", "sim_int(us)"]].median()
        out = out.join(sims, on="config")
    return out


def compare_moe(kernel: pd.DataFrame, platform: Platform, progress=None) -> pd.DataFrame:
    """Measured MoE speedups beside the simulator's for the same configurations."""
    kernel = _replay_hardware_rows(kernel, platform)
    meas = measured_speedups(kernel)
    identical = _identical(kernel)
    rows = []
    items = meas.to_dict("records")
    for row in (progress(items) if progress else items):
        try:
            cfg = parse_config(row["config"])
        except InputError:
            if pd.isna(row.get("sim_wave(us)", np.nan)):
                raise
            sim = {"wave_us": row["sim_wave(us)"], "int_us": row["sim_int(us)"],
                   "speedup": row["sim_wave(us)"] / row["sim_int(us)"]}
            names = {"config": row["config"], "model": row["config"], "precision": "", "routing": "", "setting": ""}
        else:
            sim = run_moe_config(cfg, platform)
            names = {"config": cfg.name, "model": cfg.model, "precision": cfg.precision, "routing": cfg.routing,
                     "setting": cfg.setting}
        rows.append({**names,
                     "measured_wave(us)": row["measured_wave(us)"], "simulated_wave(us)": sim["wave_us"],
                     "measured_int(us)": row["measured_int(us)"], "simulated_int(us)": sim["int_us"],
                     "measured_speedup": row["measured_speedup"], "simulated_speedup": sim["speedup"],
                     "schedules_identical": bool(identical.get(row["config"], False))})
    return add_relative_errors(pd.DataFrame(rows), QUANTITIES)


def _replay_hardware_rows(kernel: pd.DataFrame, platform: Platform) -> pd.DataFrame:
    """Hardware-label rows without a stored replay get one on ``platform`` (``resimulate``)."""
    from xstage.compare.moe_records import resimulate

    labels = ~kernel["config"].astype(str).str.contains("/")
    stored = kernel["sim_wave(us)"].astype(float).notna() if "sim_wave(us)" in kernel else pd.Series(False, index=kernel.index)
    if not (labels & ~stored).any() or "measured_l1(us)" not in kernel:
        return kernel
    replayed = resimulate(kernel[labels & ~stored], platform, platform.name)
    return pd.concat([kernel[~(labels & ~stored)], replayed])


def _identical(kernel: pd.DataFrame) -> dict:
    """{config: True} for hardware configurations whose two tile orders are the same launch
    (``moe_records`` rebuilds them; catalog configurations have no such record)."""
    from xstage.compare.moe_records import _identical_column

    hw = kernel[(kernel["experiment"] == "moe") & ~kernel["config"].astype(str).str.contains("/")]
    needed = {"lead_rows", "num_sms", "hidden", "intermediate", "tokens"}
    if hw.empty or not needed <= set(hw.columns):
        return {}
    return _identical_column(hw).to_dict()


def moe_error_summary(frame: pd.DataFrame) -> dict:
    out = frame_error_summary(frame, QUANTITIES)
    out["speedup_sign_agreement"] = sign_agreement(frame["measured_speedup"], frame["simulated_speedup"])
    if "schedules_identical" in frame and frame["schedules_identical"].any():  # a winner needs two different orders
        distinct = frame[~frame["schedules_identical"].astype(bool)]
        out["n_identical_schedules"] = int(frame["schedules_identical"].sum())
        out["speedup_sign_agreement_distinct"] = sign_agreement(distinct["measured_speedup"],
                                                                distinct["simulated_speedup"])
    return out
