"""Closed-form engine for uniform bursts: K identical producers, vectorised over bursts and configurations.

K identical producers start together, are slowed by the same factor and finish together, so the
X-Stage's state at a burst start is one number, the level q_n. From ``xstage.sim.model.warmup_bursts``:

    T_n = max(T_iss0, (V - Q + q_n) / R)          issue time of burst n
    q_{n+1} = [min(q_n + Delta, Q - R G)]_+       Delta = V - R (T_iss0 + G)

and from q_0 = 0 the recurrence has the closed form q_n = clip(n Delta, 0, [Q - R G]_+), so every burst
is one array expression. Isolated and completion-coupled bursts always start drained (T_n constant; the
period is the drain completion max(T_iss0, V/R) plus G); lockstep bursts too, their period max(drain
completion, T_n + barrier) + G; local bursts take T_iss0.

``uniform_bursts`` returns per-burst arrays (one row per burst: all K producers are identical);
``uniform_summaries`` evaluates many configurations at once (numpy broadcasting, in chunks so memory
stays bounded) without any per-burst rows. The simpy engine (``xstage.sim.bursts``) is the reference for
arbitrary producers; ``tests/sim/test_core_engines.py`` cross-checks the two.

Measured (``python benchmarks/bench_engines.py``): see docs/model.md, "Speed".
"""

import numpy as np

_CHUNK_CELLS = 1 << 22    # configurations x bursts evaluated at once by uniform_summaries (32 MiB of floats)


def _issue_times(mode, k, t0, V, R, Q, G):
    """T_k (sender-visible issue) and the level at burst start, broadcast over k and the parameters."""
    if mode == "periodic":
        delta = V - R * (t0 + G)
        cap = np.maximum(Q - R * G, 0.0)
        q = np.clip(k * delta, 0.0, cap)
        return np.maximum(t0, (V - Q + q) / R), q
    zero = np.zeros(np.broadcast(k, t0, V, R, Q, G).shape)
    if mode in ("isolated", "lockstep"):
        return zero + np.maximum(t0, (V - Q) / R), zero
    if mode == "coupled":
        return zero + np.maximum(t0, V / R), zero
    if mode == "local":
        return zero + t0, zero
    raise ValueError(f"mode(={mode!r}) must be periodic, isolated, coupled, local or lockstep")


def _period(mode, T, t0, V, R, G, barrier=0.0):
    if mode == "isolated":
        return np.maximum(t0, V / R) + G + 0.0 * T
    if mode == "lockstep":      # the barrier (after the issue end) overlaps the drain
        return np.maximum(np.maximum(t0, V / R), T + barrier) + G
    return T + G


def _tail(mode, T, q, t0, V, R, Q):
    """(drain completion after the burst start, level at the issue end) of a burst starting at level q."""
    if mode == "local":
        return T, 0.0 * T
    if mode in ("isolated", "coupled", "lockstep"):
        e = np.clip(V - R * np.maximum(t0, (V - Q) / R), 0.0, Q) + 0.0 * T
        return np.maximum(t0, V / R) + 0.0 * T, e
    e = np.clip(q + V - R * T, 0.0, Q)
    return T + e / R, e


def uniform_bursts(mode: str, bursts: int, t0: float, V: float, R: float, Q: float, G: float,
                   barrier: float = 0.0) -> dict:
    """Per-burst arrays of one configuration: start(us), issue(us), period(us) (NaN for the last burst),
    level at the start (bytes); scalars drained_us (first issue to the last byte drained) and peak (bytes).
    ``barrier``: the lockstep barrier's time (mode lockstep only)."""
    k = np.arange(bursts, dtype=float)
    T, q = _issue_times(mode, k, t0, V, R, Q, G)
    P = _period(mode, T, t0, V, R, G, barrier)
    start = np.zeros(bursts)
    np.cumsum(P[:-1], out=start[1:])
    period = np.append(P[:-1], np.nan)
    done, e = _tail(mode, T[-1], q[-1], t0, V, R, Q)
    peak = float(np.max(_tail(mode, T, q, t0, V, R, Q)[1])) if mode != "local" else 0.0
    return {"start": start, "issue": T, "period": period, "level": q, "drained_us": float(start[-1] + done),
            "peak": peak}


def window_median(values: np.ndarray, lo, hi):
    """Median of values[..., lo:hi] for a nondecreasing sequence: the middle element(s), as pandas does."""
    n = hi - lo
    a = np.take_along_axis(values, np.atleast_1d(lo + (n - 1) // 2)[..., None], axis=-1)[..., 0]
    b = np.take_along_axis(values, np.atleast_1d(lo + n // 2)[..., None], axis=-1)[..., 0]
    return 0.5 * (a + b)


def uniform_summaries(mode: str, bursts: int, skip, t0, V, R, Q, G, barrier=0.0) -> dict:
    """Median issue time and period over bursts skip.. of many configurations at once (1-D arrays or
    scalars, broadcast together), plus drained_us and peak; no per-burst rows are kept. ``barrier``: the
    lockstep barrier's time (one scalar; mode lockstep only)."""
    t0, V, R, Q, G, skip = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (t0, V, R, Q, G, skip)))
    shape = t0.shape
    flat = [x.reshape(-1) for x in (t0, V, R, Q, G, skip)]
    m = flat[0].size
    out = {key: np.empty(m) for key in ("T_iss_us", "period_us", "drained_us", "peak_bytes")}
    step = max(1, _CHUNK_CELLS // bursts)
    k = np.arange(bursts, dtype=float)
    for i in range(0, m, step):
        t0c, Vc, Rc, Qc, Gc, sc = (x[i:i + step, None] for x in flat)
        T, q = _issue_times(mode, k, t0c, Vc, Rc, Qc, Gc)
        P = _period(mode, T, t0c, Vc, Rc, Gc, barrier)
        lo = np.minimum(sc[:, 0].astype(int), bursts - 1)
        out["T_iss_us"][i:i + step] = window_median(T, lo, bursts)
        lo_p = np.minimum(sc[:, 0].astype(int), bursts - 2)
        out["period_us"][i:i + step] = window_median(P, lo_p, bursts - 1)
        done, e = _tail(mode, T[:, -1], q[:, -1], t0c[:, 0], Vc[:, 0], Rc[:, 0], Qc[:, 0])
        out["drained_us"][i:i + step] = P[:, :-1].sum(axis=1) + done
        out["peak_bytes"][i:i + step] = e if mode != "local" else 0.0
    return {key: v.reshape(shape) for key, v in out.items()}
