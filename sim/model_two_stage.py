"""Closed forms of the two-stage X-Stage (platform schema 2; ``xstage.sim.platform`` has the fields).

A per-SM store stage of rate r_sm and a per-SM outstanding limit q_sm change only the fluid queue's
inputs (T_iss0 and Q(K)), so ``xstage.sim.model``'s forms hold with them; a relaxing capacity (rho) is a
new dynamic of ``xstage.sim.fluid.FluidQueue`` with the forms below. Derivations: docs/model.md,
"The two-stage X-Stage (schema 2)"; tests: tests/sim/test_platform_two_stage.py.

``exponential`` (``Platform.capacity_relax_exponential``, session 9): the capacity falls exponentially toward the
floor instead of linearly, dC/dt = -rho (C - Q_f) / (Q - Q_f) while held back; the forms take it as a keyword
(tests: tests/sim/test_relax_exponential.py).
"""

import math

from xstage.sim import model


def sm_stage_issue_time0_us(issue_time0_us: float, bytes_per_producer: float, sm_store_Bpus: float | None) -> float:
    """T_iss0 behind a per-SM store stage of rate r_sm: max(T_iss0, B / r_sm).

    The stage holds nothing of its own: a producer's bytes leave its SM at most at r_sm and the sender sees
    the issue end when the last one has left, so the stage caps the producer's injection rate at r_sm.
    Every closed form above then holds with this T_iss0. None: no stage.
    """
    if sm_store_Bpus is None:
        return issue_time0_us
    return max(issue_time0_us, bytes_per_producer / sm_store_Bpus)


def two_stage_capacity_bytes(shared_capacity_bytes: float, producers: int, sm_outstanding_bytes: float | None) -> float:
    """Q(K) = Q_shared(K) + K q_sm: K per-SM outstanding limits in front of a shared buffer.

    For K symmetric producers the tandem is one fluid queue of this capacity: the shared buffer drains at R
    while anything is outstanding (an SM's stage refills it at once), and a producer stalls only when its own
    q_sm and the shared buffer are both full, which happens to all K together. None: no per-SM limit.
    """
    if sm_outstanding_bytes is None:
        return shared_capacity_bytes
    return shared_capacity_bytes + producers * sm_outstanding_bytes


def relaxing_isolated_issue_time_us(issue_time0_us: float, volume_bytes: float, drain_rate_Bpus: float,
                                    capacity_bytes: float, floor_bytes: float, relax_Bpus: float,
                                    exponential: bool = False) -> float:
    """Eq. 7 with a relaxing capacity (schema 2): a burst from an empty X-Stage whose capacity, once full,
    shrinks at rho from Q to the floor Q_f (the producers then get R - rho in) and is back at Q when empty.

    With a = V / T_iss0 the producers' rate: if V - R T_iss0 <= Q the burst never fills (T_iss0). Else the
    queue fills at t1 = Q / (a - R) with V1 = V - a t1 still to issue; the capacity falls for at most
    ts = (Q - Q_f) / rho, during which R - rho gets in: T = t1 + V1 / (R - rho) if V1 <= (R - rho) ts,
    else t1 + ts + (V1 - (R - rho) ts) / R = (V - Q_f) / R, Eq. 7 with the floor.

    ``exponential``: the capacity falls as Q_f + (Q - Q_f) exp(-(t - t1) / tau), tau = (Q - Q_f) / rho, so what gets
    in after t1 is R s - (Q - Q_f)(1 - exp(-s / tau)) and T = t1 + s with s its root at V1
    (``exponential_fill_time_us``).
    """
    t0, V, R, Q = issue_time0_us, volume_bytes, drain_rate_Bpus, capacity_bytes
    if V - R * t0 <= Q:
        return t0
    t1, left = _fill(t0, V, R, Q)
    if exponential:
        return t1 + exponential_fill_time_us(left, R, Q - floor_bytes, (Q - floor_bytes) / relax_Bpus)
    ts = (Q - floor_bytes) / relax_Bpus
    slow = drain_rate_Bpus - relax_Bpus
    if left <= slow * ts:
        return t1 + left / slow
    return t1 + ts + (left - slow * ts) / R


def _fill(t0: float, V: float, R: float, Q: float) -> tuple:
    """(t1, V1) of a burst that fills the X-Stage: when it fills, t1 = Q / (a - R) with a = V / T_iss0, and what is
    still to issue then, V1 = V - a t1. A zero issue time (a burst inside the store buffer with no fixed time: a
    fitted free-running law can say so; session 26's H100 fresh4 / fresh7 fits divided by it) is the limit a -> inf:
    the X-Stage fills at once with V - Q still to issue."""
    if t0 <= 0:
        return 0.0, V - Q
    a = V / t0
    t1 = Q / (a - R)
    return t1, V - a * t1


def exponential_fill_time_us(nbytes: float, drain_rate_Bpus: float, excess_bytes: float, tau_us: float) -> float:
    """The time s a full X-Stage whose capacity stands ``excess_bytes`` = c above its floor and falls exponentially
    with time constant ``tau_us`` (c(s) = c exp(-s / tau); tau = (Q - Q_f) / rho) takes to let ``nbytes`` more in:
    the root of g(s) = R s - c (1 - exp(-s / tau)) - nbytes.

    g is increasing (g' = R - (c / tau) exp(-s / tau) >= R - rho > 0 for c <= Q - Q_f) and convex, so Newton's
    method from s = (nbytes + c) / R, where g = c exp(-s / tau) >= 0, falls monotonically onto the root; it stops
    when a step no longer shrinks s (machine precision). c = 0: nbytes / R."""
    R, c = drain_rate_Bpus, excess_bytes
    if c <= 0.0 or nbytes <= 0.0:
        return max(nbytes, 0.0) / R
    s = (nbytes + c) / R
    for _ in range(200):
        step = (R * s + c * math.expm1(-s / tau_us) - nbytes) / (R - c / tau_us * math.exp(-s / tau_us))
        if not step > 0.0:
            break
        s -= step
    return s


def relaxing_isolated_end_level_bytes(issue_time0_us, volume_bytes, drain_rate_Bpus, capacity_bytes, floor_bytes,
                                      relax_Bpus, exponential: bool = False) -> float:
    """Outstanding bytes when that isolated burst's issue ends: V - R T_iss0 if it never filled, else the
    capacity it had shrunk to."""
    t0, V, R, Q = issue_time0_us, volume_bytes, drain_rate_Bpus, capacity_bytes
    if V - R * t0 <= Q:
        return model._pos(V - R * t0)
    T = relaxing_isolated_issue_time_us(t0, V, R, Q, floor_bytes, relax_Bpus, exponential)
    t1, _ = _fill(t0, V, R, Q)
    if exponential:
        return floor_bytes + (Q - floor_bytes) * math.exp(-(T - t1) * relax_Bpus / (Q - floor_bytes)) \
            if Q > floor_bytes else Q
    return max(Q - relax_Bpus * (T - t1), floor_bytes)


def relaxing_periodic_issue_time_us(gap_us: float, issue_time0_us: float, volume_bytes: float,
                                    drain_rate_Bpus: float, capacity_bytes: float, floor_bytes: float,
                                    relax_Bpus: float, exponential: bool = False) -> float:
    """Steady T_iss of periodic bursts with a relaxing capacity, where a closed form exists (else NaN):

    - the isolated burst's end level drains within the gap (<= R G): every burst starts empty at full
      capacity, T = ``relaxing_isolated_issue_time_us``;
    - the steady state at Q never holds the producers back ((Delta > 0 and R G < Q) or V - R T_iss0 > Q
      fails): the capacity never shrinks, T = max(T_iss0, V/R - G);
    - it does, and R G < Q_f: the queue never empties, the capacity settles at its floor, T =
      ``issue_time_with_capacity_us`` with Q_f.
    Between (Q_f <= R G < the isolated end level) the capacity resets in some gaps and not others: NaN.
    ``exponential``: the same cases; where the queue never empties the capacity tends to its floor (never
    reaching it), so Q_f's form is the limit of the steady state.
    """
    t0, V, R, G, Q, Qf = issue_time0_us, volume_bytes, drain_rate_Bpus, gap_us, capacity_bytes, floor_bytes
    if relaxing_isolated_end_level_bytes(t0, V, R, Q, Qf, relax_Bpus, exponential) <= R * G:
        return relaxing_isolated_issue_time_us(t0, V, R, Q, Qf, relax_Bpus, exponential)
    delta = V - R * (t0 + G)
    if not ((delta > 0 and R * G < Q) or V - R * t0 > Q):
        return max(t0, V / R - G)
    if R * G < Qf:
        return model.issue_time_with_capacity_us(G, t0, V, R, Qf)
    return math.nan


def relaxing_warmup_bursts(gap_us, issue_time0_us, volume_bytes, drain_rate_Bpus, capacity_bytes, *,
                           relax_Bpus, floor_bytes, relax_exponential: bool = False) -> int | None:
    """Periodic bursts from empty with a relaxing capacity: 0 when every burst starts empty (the isolated
    burst's end level drains within the gap), else None (no closed form for the warm-up)."""
    end = relaxing_isolated_end_level_bytes(issue_time0_us, volume_bytes, drain_rate_Bpus, capacity_bytes,
                                            floor_bytes, relax_Bpus, relax_exponential)
    return 0 if end <= drain_rate_Bpus * gap_us else None


def steady_issue_and_period(mode, G, t0, V, R, Q, relax_Bpus=None, floor_bytes=None,
                            relax_exponential: bool = False) -> tuple[float, float]:
    """(T_iss, period) of one mode's steady state: the exact closed forms of ``xstage.sim.model``, or with a
    relaxing capacity (``relax_Bpus``, ``floor_bytes``, ``relax_exponential``) its isolated and periodic forms
    (NaN where none exists)."""
    if relax_Bpus is not None and mode == "isolated":
        return (relaxing_isolated_issue_time_us(t0, V, R, Q, floor_bytes, relax_Bpus, relax_exponential),
                model.isolated_period_us(G, t0, V, R))
    if relax_Bpus is not None and mode == "periodic":
        T = relaxing_periodic_issue_time_us(G, t0, V, R, Q, floor_bytes, relax_Bpus, relax_exponential)
        return T, T + G
    if mode == "isolated":
        return model.isolated_issue_time_us(t0, V, R, Q), model.isolated_period_us(G, t0, V, R)
    if mode == "local":
        return t0, t0 + G
    if mode == "coupled":
        return model.coupled_issue_time_us(t0, V, R), model.coupled_period_us(G, V, R, t0)
    return model.issue_time_with_capacity_us(G, t0, V, R, Q), model.periodic_period_us(G, t0, V, R, Q)
