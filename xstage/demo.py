"""The demo's computation: the bundled platforms' reference scenarios, simulated (pure: no printing, no files).

For a platform: the Burst-Gap sweeps of the paper's Fig. 3 (periodic gap sweep, isolated volume sweep, the
local control and the completion-coupled counterfactual), one MoE configuration replayed with the
expert-wave and interleaved schedules, and the FlashAttention design audit. ``xstage demo``
(``xstage.cli.demo``) writes them, and the dashboards, into one folder.
"""

import math

import pandas as pd

REFERENCE_MOE = "Qwen3.5/w8a8/skewed/M"


def burst_sweeps(platform) -> pd.DataFrame:
    """Fig. 3 a-c on the simpy simulator (the reference engine): one summary row per (mode, K, B, G).

    Gaps are fractions of G*, rounded *up* to 1e-4 us: rounding G* down leaves a gap a hair short of it,
    whose warm-up from an empty X-Stage is ceil((Q - R G) / Delta) bursts with Delta -> 0 (7,400 bursts
    at 2.7e-5 us short). Every periodic point runs past its closed-form warm-up, so its summary is steady.
    """
    from xstage.sim.bursts import BurstConfig, simulate_bursts
    from xstage.sim.model import recovery_gap_us, warmup_bursts

    K, B = platform.sm_count, 32 * 1024
    t0, V, R = platform.issue_time0_us(K, B), K * B, platform.drain_rate_Bpus
    g_star = recovery_gap_us(t0, V, R)
    gaps = [math.ceil(g_star * f * 1e4) / 1e4 for f in (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)]
    rows = []
    for mode in ("periodic", "local", "coupled"):
        for g in gaps:
            n = max(40, warmup_bursts(g, t0, V, R, platform.capacity_bytes(K)) + 10)
            rows.append(simulate_bursts(platform, BurstConfig(K, B, g, n, mode=mode, engine="simpy"),
                                        record_occupancy=False).summary(platform))
    for kib in (4, 8, 16, 24, 32, 40, 48, 64, 96, 128):
        cfg = BurstConfig(K, kib * 1024, 1.0, 3, mode="isolated", engine="simpy")
        rows.append(simulate_bursts(platform, cfg, record_occupancy=False).summary(platform))
    return pd.DataFrame(rows)


def reference_moe(platform) -> dict:
    """The reference MoE configuration replayed with the expert-wave and interleaved schedules (one row)."""
    from xstage.sim.sweep import run_moe_config

    return run_moe_config(REFERENCE_MOE, platform)


def platform_summary(platform, sweeps: pd.DataFrame, moe: dict) -> dict:
    """One platform's entry of the demo's summary.json: the model at K SMs, 32 KiB, no gap; the simpy
    engine's steady windows against the exact steady state; the MoE reference; the FlashAttention audit."""
    from xstage.sim.scenarios import burst_model, fa_model

    K = platform.sm_count
    periodic = sweeps[sweeps["mode"] == "periodic"]
    if not periodic["steady"].all():
        raise RuntimeError(f"demo burst sweep on {platform.name}: a periodic point ran shorter than its warm-up")
    # against the exact steady state (model_T_iss_us = max(T_iss0, V/R - G, (V - Q)/R)), steady windows only
    err = ((periodic["T_iss_us"] - periodic["model_T_iss_us"]).abs() / periodic["model_T_iss_us"]).max()
    return {
        "model_K_32KiB_gap0": burst_model(platform, K, 32 * 1024, 0.0),
        "sim_vs_model_max_rel_err_T_iss": float(err),  # simpy engine vs the exact steady state
        "moe_reference": {k: moe[k] for k in ("config", "wave_us", "int_us", "speedup", "wave_span_median_us",
                                              "int_span_median_us")},
        "fa_audit": fa_model(platform, K, 128, 128, 128, 2, 0.79),
    }
