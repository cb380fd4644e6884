"""Sweeps over the workload catalog: one row per configuration, in parallel.

``run_moe_config`` replays one MoE configuration with expert-wave and interleaved (lead D =
max(1, D_knee), Eq. 16) and returns a flat dict; ``run_fa_config`` replays one FlashAttention shape
and sequence length fused (X-Stage), FA-only and completion-coupled. ``sweep`` maps either over
a list, in this process (jobs=1), a local process pool, or a Dask distributed cluster (scheduler
address), reporting progress through a callback. ``summarize_moe`` gives the paper's statistics.
"""

import math

import numpy as np
import pandas as pd

from xstage.errors import InputError, require_int, require_positive
from xstage.sim import model
from xstage.sim.platform import Platform
from xstage.sim.pool import DeferredSignals, WorkerPool
from xstage.sim.replay import ReplayConfig, replay
from xstage.sim.schedule_fa import burst_waves, fa_qloop
from xstage.sim.schedules import WAVE_IMBALANCE, default_waves
from xstage.sim.workloads.catalog import (FaConfig, MoeConfig, fa_catalog, fa_timing, moe_configs, moe_workload,
                                  parse_config)


def moe_design(w, platform: Platform, num_sms: int) -> dict:
    """Design-test verdicts of a workload: Eq. 10 for the wave gap, Eq. 14 for interleaving, Eq. 16."""
    vt = w.shape["block_m"] * w.combine_bytes_per_row
    V = num_sms * vt
    t0 = platform.issue_time0_us(num_sms, vt)
    R = platform.drain_rate_Bpus
    wave = model.design_test(model.wave_gap_us(w.l2_us), t0, V, R, platform.capacity_bytes(num_sms))
    n1, n2 = w.grid.l1_tiles_per_row, w.grid.l2_tiles_per_row
    return {
        "V_MiB": V / 2**20, "T_iss0_us": t0, "G_wave_us": w.l2_us,
        "G_int_us": model.interleaved_gap_us(w.l2_us, w.l1_us, n1, n2),
        "eq10_rate_ok_wave": wave.rate_bound_ok, "eq10_capacity_ok": wave.capacity_bound_ok,
        "dT_iss_wave_us": model.issue_overhead_us(w.l2_us, t0, V, R),
        "dT_iss_int_us": model.interleaved_issue_overhead_us(model.issue_overhead_us(w.l2_us, t0, V, R),
                                                              w.l1_us, n1, n2),
        "eq14_interleaving_sufficient": model.interleaving_sufficient(V, t0, w.l2_us, w.l1_us, n1, n2, R),
        "D_knee": model.lead_knee_rows(w.shape["block_n"], num_sms, w.shape["intermediate"]),
    }


def moe_replay_config(w, **kw) -> ReplayConfig:
    """The replay settings of a MoE workload: its catalog epilogue times plus ``kw``."""
    base = {"remote_epilogue_us": w.notes["remote_epilogue_us"], "local_epilogue_us": w.notes["local_epilogue_us"]}
    return ReplayConfig(**{**base, **kw})


def run_moe_config(name: str, platform: Platform, *, num_sms: int | None = None, staging_slots: int = 2,
                   lead_rows: int | None = None, overrides: dict | None = None,
                   wave_imbalance: float = WAVE_IMBALANCE) -> dict:
    """Replay one configuration with both schedules; one flat row.

    ``wave_imbalance``: the expert-wave heuristic's L1 tiles per wave in units of the SM count
    (``schedules.default_waves``; 16 by default, DeepGEMM's own factor is about 4).
    """
    require_positive("wave_imbalance", wave_imbalance)
    cfg = parse_config(name) if isinstance(name, str) else name
    sms = num_sms or platform.sm_count - platform.sm_count % 2   # CTA pairs
    w = moe_workload(cfg, platform, num_sms=sms, mainloop_override_us=overrides)
    waves = default_waves(w.grid, sms, avg_rows_per_expert=w.notes["avg_rows_per_expert"], imbalance=wave_imbalance)
    D = max(1, w.lead_knee_rows) if lead_rows is None else lead_rows
    rc = moe_replay_config(w, staging_slots=staging_slots, record_occupancy=False)
    row = {"config": cfg.name, "model": cfg.model, "precision": cfg.precision, "routing": cfg.routing,
           "setting": cfg.setting, "rank": w.notes["rank"], "local_experts": w.shape["local_experts"],
           "tokens_local": int(w.tokens_per_expert.sum()), "rows": w.grid.rows, "l1_us": w.l1_us, "l2_us": w.l2_us,
           "lead_rows": D, "num_sms": sms, "staging_slots": staging_slots, "wave_imbalance": float(wave_imbalance)}
    for kind, short in (("expert_wave", "wave"), ("interleaved", "int")):
        s = w.schedule(kind, sms, lead_rows=D, wave_experts=waves if kind == "expert_wave" else None)
        if kind == "expert_wave":
            row["wave_experts"] = s.params["wave_experts"][0]
        r = replay(s, w.mainloop_us(s), w.remote_bytes(s), platform, rc)
        sm = r.summary()
        row.update({"tiles": sm["tiles"], f"{short}_us": sm["makespan_us"],
                    f"{short}_span_median_us": sm["span_median_us"], f"{short}_span_p90_us": sm["span_p90_us"],
                    f"{short}_stall_per_sm_us": sm["mma_stall_per_sm_us"],
                    f"{short}_dep_wait_per_sm_us": sm["dep_wait_per_sm_us"],
                    f"{short}_tensor_activity": sm["tensor_activity"], f"{short}_peak_queue_MiB": sm["peak_queue_MiB"],
                    f"{short}_wall_s": r.wall_s})
    row["speedup"] = row["wave_us"] / row["int_us"]
    row.update(moe_design(w, platform, sms))
    return row


def fa_replays(shape: str, seq_len: int, platform: Platform, *, heads: int | None = None,
               num_sms: int | None = None, latency_us: float | None = None, remote_fraction: float = 1.0,
               record_occupancy: bool = False) -> tuple:
    """FA-only, X-Stage-fused and completion-coupled replays of one shape and sequence length.

    ``remote_fraction`` scales every tile's bytes (e.g. (W - 1) / W when the self chunk stays local).
    Returns (config, timing, schedule, {"fa_only", "fused", "coupled"}: ReplayResult, latency_us, K).
    """
    cfg = FaConfig(shape, seq_len, heads)
    sms = num_sms or platform.sm_count
    tm = fa_timing(cfg, platform)
    sched = fa_qloop(cfg.heads_per_rank, seq_len, sms, block_m=tm["block_m"])
    T = len(sched.tiles)
    ml = np.full(T, tm["qloop_us"])
    nbytes = np.full(T, float(tm["tile_bytes"]) * remote_fraction)
    lat = fa_catalog()["completion_latency_us"] if latency_us is None else latency_us
    K = min(sms, T)
    base = dict(staging_slots=0, cover_us=tm["cover_us"], remote_epilogue_us=0.0, local_epilogue_us=0.0,
                record_occupancy=record_occupancy, producers=K)
    runs = {"fa_only": replay(sched, ml, np.zeros(T), platform, ReplayConfig(**base)),
            "fused": replay(sched, ml, nbytes, platform, ReplayConfig(**base)),
            "coupled": replay(sched, ml, nbytes, platform,
                              ReplayConfig(**base, coupled=True, completion_latency_us=lat))}
    return cfg, tm, sched, runs, lat, K


def run_fa_config(shape: str, seq_len: int, platform: Platform, *, heads: int | None = None,
                  num_sms: int | None = None, latency_us: float | None = None) -> dict:
    """FA-only, X-Stage-fused and completion-coupled replays of one shape and sequence length."""
    cfg, tm, sched, runs, lat, K = fa_replays(shape, seq_len, platform, heads=heads, num_sms=num_sms,
                                              latency_us=latency_us)
    sms = num_sms or platform.sm_count
    T = len(sched.tiles)
    only, fused, coupled = runs["fa_only"], runs["fused"], runs["coupled"]
    R = platform.drain_rate_Bpus
    V = K * tm["tile_bytes"]
    t0 = platform.issue_time0_us(K, tm["tile_bytes"])
    g_star = model.recovery_gap_us(t0, V, R)
    a2a_us = T * tm["tile_bytes"] / R
    N_t = burst_waves(cfg.heads_per_rank, seq_len, sms, tm["block_m"])
    dcc = model.fa_coupled_exposure_us(V, R, lat, tm["cover_us"])
    dt = model.fa_issue_stall_us(V, R, tm["qloop_us"], t0)
    return {
        "shape": shape, "M": seq_len, "heads": cfg.heads_per_rank, "tiles": T, "burst_waves": N_t,
        "kv_step_us": tm["kv_step_us"], "G_Qloop_us": tm["qloop_us"], "cover_us": tm["cover_us"],
        "fa_us": only.makespan_us, "fused_us": fused.makespan_us, "coupled_us": coupled.makespan_us,
        "serial_us": only.makespan_us + a2a_us,
        "E_res_us": fused.makespan_us - only.makespan_us, "E_cc_us": coupled.makespan_us - only.makespan_us,
        "hiding_ratio": 1 - (fused.makespan_us - only.makespan_us) / a2a_us,
        "speedup_vs_serial": (only.makespan_us + a2a_us) / fused.makespan_us,
        "V_MiB": V / 2**20, "T_iss0_us": t0, "G_star_us": g_star,
        "M_ub_star": model.fa_seq_upper_bound_tokens(tm["block_n"], g_star, tm["kv_step_us"]),
        "model_dt_us": dt, "model_E_drain_us": model.fa_drain_residual_us(N_t, dt, tm["cover_us"]),
        "model_E_cc_us": N_t * dcc, "fused_peak_queue_MiB": fused.peak_queue_bytes / 2**20,
    }


def _moe_job(args):
    name, platform, kw = args
    return run_moe_config(name, platform, **kw)


def _fa_job(args):
    shape, M, platform, kw = args
    return run_fa_config(shape, M, platform, **kw)


def sweep(kind: str, platform: Platform, *, jobs: int = 1, scheduler: str | None = None, configs=None,
          progress=None, **kw) -> pd.DataFrame:
    """Run a catalog sweep; ``progress(done, total)`` is called after each configuration."""
    jobs = require_int("jobs", jobs)
    if kind == "moe":
        names = [c.name if isinstance(c, MoeConfig) else c for c in (configs or moe_configs())]
        items, fn = [(n, platform, kw) for n in names], _moe_job
    elif kind == "fa":
        shapes = list(fa_catalog()["shapes"])
        pairs = configs or [(s, M) for s in shapes for M in fa_catalog()["seq_lens"]]
        items, fn = [(s, M, platform, kw) for s, M in pairs], _fa_job
    else:
        raise InputError("sweep kind", kind, "must be moe or fa")
    if not items:
        raise InputError("configs", configs, "must name at least one configuration")
    rows = [None] * len(items)
    done = 0

    def tick():
        if progress:
            progress(done, len(items))

    if scheduler:
        try:
            from distributed import Client, as_completed as dask_completed
        except ImportError:
            raise InputError("scheduler", scheduler,
                             "needs dask.distributed (pip install 'dask[distributed]')") from None
        with Client(scheduler) as client:
            futures = client.map(fn, items, pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            for fut in dask_completed(futures):
                rows[index[fut.key]] = fut.result()
                done += 1
                tick()
    elif jobs == 1:
        for i, item in enumerate(items):
            rows[i] = fn(item)
            done += 1
            tick()
    else:
        # SIGINT / SIGTERM are raised only between submits and while waiting for a result, never inside the
        # executor's own locks (see ``sim/pool.py``); results come in submission order
        with DeferredSignals() as signals, WorkerPool(jobs) as pool:
            futures = []
            for item in items:
                signals.check()
                futures.append(pool.submit(fn, item))
            for i, fut in enumerate(futures):
                rows[i] = signals.result(fut)
                done += 1
                tick()
    return pd.DataFrame(rows)


def _geomean(x) -> float:
    x = np.asarray(x, dtype=float)
    return float(np.exp(np.mean(np.log(x)))) if len(x) else math.nan


def summarize_moe(frame: pd.DataFrame) -> dict:
    s = frame["speedup"]
    out = {"n_configs": int(len(frame)), "geomean_speedup": _geomean(s), "median_speedup": float(s.median()),
           "max_speedup": float(s.max()), "min_speedup": float(s.min()),
           "geomean_speedup_skewed": _geomean(s[frame["routing"] == "skewed"]),
           "geomean_speedup_balanced": _geomean(s[frame["routing"] == "balanced"]),
           "max_config": frame.loc[s.idxmax(), "config"], "min_config": frame.loc[s.idxmin(), "config"],
           "regressions": int((s < 1.0).sum())}
    for col in ("model", "precision", "setting"):
        out[f"geomean_by_{col}"] = {k: _geomean(g["speedup"]) for k, g in frame.groupby(col, sort=False)}
    return out


def summarize_fa(frame: pd.DataFrame) -> dict:
    out = {"n_configs": int(len(frame))}
    for shape, g in frame.groupby("shape", sort=False):
        slope, icpt = np.polyfit(g["M"], g["G_Qloop_us"], 1)
        out[shape] = {"G_Qloop_slope_us_per_token": float(slope), "G_Qloop_intercept_us": float(icpt),
                      "M_ub_star": int(g["M_ub_star"].iloc[0]),
                      "E_res_us": dict(zip(g["M"].tolist(), g["E_res_us"].round(3).tolist())),
                      "E_cc_us": dict(zip(g["M"].tolist(), g["E_cc_us"].round(3).tolist()))}
    return out
