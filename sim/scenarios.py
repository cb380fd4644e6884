"""The model's quantities for one scenario, as one flat dict each (pure: no printing, no files).

``burst_model``: every Sec. 3 quantity of K producers issuing B bytes each, then a gap G.
``fa_model``: the FlashAttention + All-to-All design audit (Eq. 17-20) of one tile shape.
Used by ``xstage model``, ``xstage model fa`` and ``xstage demo``.
"""

from xstage.sim import model, model_two_stage
from xstage.units import MiB


def burst_model(platform, producers: int, bytes_per_producer: int, gap_us: float) -> dict:
    """All Sec. 3 quantities for one (K, B, G) on a platform, as one flat dict."""
    K, B, G = producers, bytes_per_producer, gap_us
    V = K * B
    R = platform.drain_rate_Bpus
    t0 = platform.issue_time0_us(K, B)
    Q = platform.capacity_bytes(K)
    test = model.design_test(G, t0, V, R, Q)
    t_iss = model.issue_time_with_capacity_us(G, t0, V, R, Q)
    period, warm, t_iso = model.periodic_period_us(G, t0, V, R, Q), model.warmup_bursts(G, t0, V, R, Q), None
    relax = platform.queue_options(K)   # a relaxing capacity (schema 2): its own closed forms
    if relax:
        exp = relax.get("relax_exponential", False)
        t_iss = model_two_stage.relaxing_periodic_issue_time_us(G, t0, V, R, Q, relax["floor_bytes"], relax["relax_Bpus"],
                                                                exp)
        period, warm = t_iss + G, None
        t_iso = model_two_stage.relaxing_isolated_issue_time_us(t0, V, R, Q, relax["floor_bytes"], relax["relax_Bpus"],
                                                                exp)
    return {
        "platform": platform.name, "producers": K, "bytes_per_producer": B, "gap_us": G,
        "volume_MiB": V / MiB, "R_GBps": platform.drain_rate_GBps, "Q_MiB": Q / MiB, "T_iss0_us": t0,
        # exact steady state of the fluid queue (what `xstage sim bursts` converges to), V > Q included
        "T_iss_us": t_iss,
        "delta_T_iss_us": t_iss - t0,
        "T_iss_with_capacity_us": t_iss,
        "T_iss_eq3_us": model.issue_time_us(G, t0, V, R),
        "G_star_us": model.recovery_gap_us(t0, V, R),
        "period_us": period,
        "period_eq2_us": model.period_us(G, t0, V, R),
        "warmup_bursts": warm,
        "T_iss_coupled_us": model.coupled_issue_time_us(t0, V, R),
        "period_coupled_us": model.coupled_period_us(G, V, R, t0),
        "drain_period_us": model.drain_period_us(V, R),
        "q_peak0_MiB": model.peak_outstanding_bytes(t0, V, R) / MiB,
        "T_iss_iso_us": t_iso if t_iso is not None else model.isolated_issue_time_us(t0, V, R, Q),
        "period_iso_us": model.isolated_period_us(G, t0, V, R),
        "injection_GBps": test.injection_rate_Bpus / 1e3,
        "rate_bound_ok": test.rate_bound_ok,
        "capacity_bound_ok": test.capacity_bound_ok,
    }


def fa_model(platform, producers, block_m, block_n, head_dim, out_bytes, sigma_us) -> dict:
    """Aligned output-tile burst, recovery gap G* and the sequence bound M_ub* (Eq. 17-20)."""
    B = model.fa_tile_bytes(block_m, head_dim, out_bytes)
    V = producers * B
    R = platform.drain_rate_Bpus
    t0 = platform.issue_time0_us(producers, B)
    Q = platform.capacity_bytes(producers)
    g_star = model.recovery_gap_us(t0, V, R)
    peak = model.peak_outstanding_bytes(t0, V, R)
    return {
        "platform": platform.name, "producers": producers, "block_m": block_m, "block_n": block_n,
        "head_dim": head_dim, "out_bytes": out_bytes, "sigma_us": sigma_us,
        "tile_KiB": B / 1024, "burst_MiB": V / MiB, "T_iss0_us": t0, "Q_MiB": Q / MiB,
        "q_peak0_MiB": peak / MiB, "capacity_bound_ok": peak <= Q,
        "G_star_us": g_star,
        "M_ub_star_tokens": model.fa_seq_upper_bound_tokens(block_n, g_star, sigma_us),
    }
