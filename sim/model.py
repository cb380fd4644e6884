"""The Burst-Gap model of the X-Stage paper (Sec. 3-4) as plain functions.

Units are in the names: ``_us`` microseconds, ``_bytes`` bytes, ``_Bpus`` bytes per microsecond.
V is the aggregate burst volume (K * B), R the effective drain rate, T0 = T_iss0(K, V) the
backpressure-free issue time, Q the effective outstanding capacity, G the producer-side gap.
"""

import math
from dataclasses import dataclass


def _pos(x: float) -> float:
    """[x]_+ = max(x, 0)."""
    return x if x > 0.0 else 0.0


# --- Sec. 3: periodic and isolated bursts ---------------------------------------------------

def drain_period_us(volume_bytes: float, drain_rate_Bpus: float) -> float:
    """Eq. 1: drain-dominated steady-state period, T_period = V / R."""
    return volume_bytes / drain_rate_Bpus


def issue_time_us(gap_us: float, issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float) -> float:
    """Eq. 3 (= Eq. 8): T_iss(G) = max(T_iss0, V/R - G)."""
    return max(issue_time0_us, volume_bytes / drain_rate_Bpus - gap_us)


def issue_time_with_capacity_us(gap_us: float, issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float,
                                capacity_bytes: float) -> float:
    """Eq. 3 with Eq. 7's floor: T_iss = max(T_iss0, V/R - G, (V - Q)/R).

    When one burst overruns the capacity (the capacity bound of Eq. 10 fails), even a drained start
    backpressures it (Eq. 7), and Eq. 3 alone under-predicts. Exact steady state of the fluid queue: the
    fixed point of the recurrence in ``warmup_bursts`` starts each burst at q* = [Q - R G]_+ (or 0 when
    Delta <= 0), and T* = max(T_iss0, (V - Q + q*)/R) is this max in every regime.
    """
    return max(issue_time_us(gap_us, issue_time0_us, volume_bytes, drain_rate_Bpus),
               (volume_bytes - capacity_bytes) / drain_rate_Bpus)


def issue_overhead_us(gap_us: float, issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float) -> float:
    """Eq. 4 (= Eq. 9): Delta T_iss = [V/R - G - T_iss0]_+."""
    return _pos(volume_bytes / drain_rate_Bpus - gap_us - issue_time0_us)


def period_us(gap_us: float, issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float) -> float:
    """Eq. 2 with Eq. 3: T_period = T_iss + G = max(T_iss0 + G, V/R) (exact within the capacity bound;
    ``periodic_period_us`` adds the overrun term)."""
    return issue_time_us(gap_us, issue_time0_us, volume_bytes, drain_rate_Bpus) + gap_us


def coupled_period_us(gap_us: float, volume_bytes: float, drain_rate_Bpus: float,
                      issue_time0_us: float = 0.0) -> float:
    """Completion-coupled counterfactual (Sec. 3.4): T_period^cc = max(T_iss0, V/R) + G.

    Every coupled burst starts drained (the issuer waited for its bytes), so its last byte leaves at
    max(T_iss0, V/R): at V/R if the burst outruns R (the queue then never empties), at T_iss0 if R keeps
    up with the issue. The paper's G + V/R is the drain-dominated case; ``issue_time0_us`` = 0 gives it.
    """
    return coupled_issue_time_us(issue_time0_us, volume_bytes, drain_rate_Bpus) + gap_us


def coupled_issue_time_us(issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float) -> float:
    """Sender-visible issue of a completion-coupled burst = its drain completion from empty, max(T_iss0, V/R)."""
    return max(issue_time0_us, volume_bytes / drain_rate_Bpus)


def recovery_gap_us(issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float) -> float:
    """Eq. 5: G* = [V/R - T_iss0]_+, the smallest gap that restores T_iss = T_iss0."""
    return _pos(volume_bytes / drain_rate_Bpus - issue_time0_us)


def peak_outstanding_bytes(issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float) -> float:
    """Eq. 6: q_peak^0 = [V - R T_iss0]_+, outstanding volume at the end of an unconstrained burst."""
    return _pos(volume_bytes - drain_rate_Bpus * issue_time0_us)


def isolated_issue_time_us(issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float,
                           capacity_bytes: float) -> float:
    """Eq. 7: T_iss^iso = max(T_iss0, (V - Q) / R)."""
    return max(issue_time0_us, (volume_bytes - capacity_bytes) / drain_rate_Bpus)


def isolated_period_us(gap_us: float, issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float) -> float:
    """Isolated bursts: the next starts G after the queue empties, max(T_iss0, V/R) + G.

    From empty the last byte drains at max(T_iss0, V/R) (the same drain completion as the coupled burst),
    whatever Q; the issue itself (Eq. 7) ends no later.
    """
    return coupled_issue_time_us(issue_time0_us, volume_bytes, drain_rate_Bpus) + gap_us


def periodic_period_us(gap_us: float, issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float,
                       capacity_bytes: float) -> float:
    """Exact steady period of periodic bursts: max(T_iss0 + G, V/R, (V - Q)/R + G).

    It is T_iss + G with T_iss = max(T_iss0, V/R - G, (V - Q)/R) (``issue_time_with_capacity_us``): the
    steady state of the recurrence in ``warmup_bursts``.
    """
    return issue_time_with_capacity_us(gap_us, issue_time0_us, volume_bytes, drain_rate_Bpus, capacity_bytes) + gap_us


def warmup_bursts(gap_us: float, issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float,
                  capacity_bytes: float) -> int:
    """Periodic bursts from an empty X-Stage: bursts before the steady state, ceil((Q - R G) / Delta).

    With q_n the level at the start of burst n, a burst fills the queue iff q_n + V - R T_iss0 > Q, and
    then ends when V - Q + q_n bytes have drained: T_n = max(T_iss0, (V - Q + q_n) / R); the gap drains
    R G. So q_{n+1} = [min(q_n + Delta, Q - R G)]_+ with Delta = V - R (T_iss0 + G): from q_0 = 0 the
    level climbs by Delta per burst to Q - R G, reached at burst ceil((Q - R G) / Delta), and stays.
    If Delta <= 0 or R G >= Q every burst starts empty: 0. Unbounded as G -> G* (Delta -> 0).
    """
    delta = volume_bytes - drain_rate_Bpus * (issue_time0_us + gap_us)
    cap = capacity_bytes - drain_rate_Bpus * gap_us
    if delta <= 0.0 or cap <= 0.0:
        return 0
    return max(0, math.ceil(cap / delta))


@dataclass(frozen=True)
class DesignTest:
    """Eq. 10: X-Stage adds no modelled backpressure when both bounds hold."""
    injection_rate_Bpus: float  # V / (T_iss0 + G)
    rate_bound_ok: bool         # V / (T_iss0 + G) <= R
    peak_outstanding_bytes: float
    capacity_bound_ok: bool     # [V - R T_iss0]_+ <= Q


def design_test(gap_us: float, issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float,
                capacity_bytes: float) -> DesignTest:
    """Eq. 10: rate bound V/(T_iss0+G) <= R and capacity bound [V - R T_iss0]_+ <= Q."""
    rate = volume_bytes / (issue_time0_us + gap_us)
    peak = peak_outstanding_bytes(issue_time0_us, volume_bytes, drain_rate_Bpus)
    return DesignTest(rate, rate <= drain_rate_Bpus * (1 + 1e-12), peak, peak <= capacity_bytes)


# --- Sec. 4.2: MegaMoE interleaving ---------------------------------------------------------

def wave_gap_us(l2_mainloop_us: float) -> float:
    """Eq. 12 (left): expert-wave gap between Linear-2 bursts, G_wave ~ T_L2^mma."""
    return l2_mainloop_us


def interleaved_gap_us(l2_mainloop_us: float, l1_mainloop_us: float, n1: float, n2: float) -> float:
    """Eq. 12 (right): G_int ~ T_L2^mma + (n1/n2) T_L1^mma."""
    return l2_mainloop_us + n1 / n2 * l1_mainloop_us


def interleaved_issue_overhead_us(wave_overhead_us: float, l1_mainloop_us: float, n1: float, n2: float) -> float:
    """Eq. 13: Delta T_iss^int = [Delta T_iss^wave - (n1/n2) T_L1^mma]_+."""
    return _pos(wave_overhead_us - n1 / n2 * l1_mainloop_us)


def interleaving_sufficient(volume_bytes: float, issue_time0_us: float, l2_mainloop_us: float,
                            l1_mainloop_us: float, n1: float, n2: float, drain_rate_Bpus: float) -> bool:
    """Eq. 14: n2 V <= R (n2 (T_iss0 + T_L2^mma) + n1 T_L1^mma): interleaving alone removes backpressure."""
    return n2 * volume_bytes <= drain_rate_Bpus * (n2 * (issue_time0_us + l2_mainloop_us) + n1 * l1_mainloop_us)


def remote_store_span_us(issue_time0_us: float, issue_overhead: float, staging_overhead_us: float = 0.0) -> float:
    """Sec. 4.2: T_RS ~ T_iss0 + Delta T_iss (+ fixed staging overhead)."""
    return issue_time0_us + issue_overhead + staging_overhead_us


def tile_stall_us(remote_store_span: float, cover_mainloop_us: float) -> float:
    """Eq. 15: per-tile critical-path stall Delta t = [T_RS - T_cover^mma]_+."""
    return _pos(remote_store_span - cover_mainloop_us)


def lead_knee_rows(block_n: int, participating_sms: int, intermediate_dim: int) -> int:
    """Eq. 16: D_knee = ceil(b_n K_SM / (2 h_inter)), the anti-starvation lead in scheduler rows."""
    return math.ceil(block_n * participating_sms / (2 * intermediate_dim))


# --- Sec. 4.3: FlashAttention + All-to-All ---------------------------------------------------

def fa_tile_bytes(block_m: int, head_dim: int, out_bytes: int) -> int:
    """B_t = b_m d s_out, the bytes one output tile sends."""
    return block_m * head_dim * out_bytes


def fa_qloop_gap_lower_us(seq_len: int, block_n: int, sigma_us: float) -> float:
    """Sec. 4.3: G_Qloop(M) >= sigma ceil(M / b_n) (fixed component dropped)."""
    return sigma_us * math.ceil(seq_len / block_n)


def fa_coupled_exposure_us(volume_bytes: float, drain_rate_Bpus: float, latency_us: float, cover_us: float) -> float:
    """Eq. 17: Delta t^cc = [V/R + T_lat - T_cover]_+ per aligned output burst (completion-coupled)."""
    return _pos(volume_bytes / drain_rate_Bpus + latency_us - cover_us)


def fa_issue_stall_us(volume_bytes: float, drain_rate_Bpus: float, qloop_gap_us: float, issue_time0_us: float) -> float:
    """Eq. 18: Delta t(M) = [V/R - G_Qloop(M) - T_iss0]_+."""
    return _pos(volume_bytes / drain_rate_Bpus - qloop_gap_us - issue_time0_us)


def fa_critical_stall_us(issue_stall: float, qk_cover_us: float) -> float:
    """Eq. 19: Delta t'(M) = [Delta t(M) - G_QK]_+."""
    return _pos(issue_stall - qk_cover_us)


def fa_drain_residual_us(burst_waves: int, issue_stall: float, qk_cover_us: float) -> float:
    """Sec. 4.3: E_drain(M) = N_t [Delta t(M) - G_QK]_+."""
    return burst_waves * fa_critical_stall_us(issue_stall, qk_cover_us)


def fa_seq_upper_bound_tokens(block_n: int, recovery_gap: float, sigma_us: float) -> int:
    """Eq. 20: M_ub* = b_n ceil(G* / sigma): every M >= M_ub* satisfies both design bounds."""
    return block_n * math.ceil(recovery_gap / sigma_us)
