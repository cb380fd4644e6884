"""Unequal drain sharing: the fluid X-Stage of ``xstage.sim.fluid`` with a fixed per-producer order of shares.

``FluidQueue`` (drain order ``fair``, the default) slows every producer by the same factor while the
queue is full. The H200's host path does not: in the free-running probe runs from empty
(``data/calibration-extra/host-probe-3a47e1b``) the producers settle within the first ~1-3 % of a run
into persistent, unequal rates, and the spread between the fastest and the slowest grows linearly with
time (docs/calibration.md, *Finite runs simulated as run*). ``OrderedFluidQueue`` (drain order
``ordered``) models that: while the queue holds the producers back, the room (R, or R - rho with a
relaxing capacity) is shared by weighted water-filling of the slow-down,

    a_i = r_i min(1, theta w_i),   sum_i a_i = room,

so producer i is slowed by a factor proportional to its weight w_i unless that would take it above its own
rate r_i (then the surplus goes to the others). With all weights equal this is ``FluidQueue`` exactly (the tests check it). When the queue
is not full every producer issues at its own rate, as in ``FluidQueue``: the aggregate dynamics (level,
admitted, drained, the instants it fills and empties) are the same; only the split among producers
differs. The weights are the caller's (``xstage.sim.bursts``: w_p = exp(-a p / (K - 1)), a = the run's
``drain_spread``). Per-producer progress is tracked in bytes (O(K) per state change), not by one
virtual clock.
"""

import math

from xstage.sim.fluid import _ULPS, FluidQueue


def water_fill(room: float, rates: list[float], weights: list[float]) -> list[float]:
    """min(r_i, theta w_i) with sum = room (room < sum(rates)), theta found by capping in r_i / w_i order."""
    order = sorted(range(len(rates)), key=lambda i: rates[i] / weights[i])
    out = [0.0] * len(rates)
    wsum = math.fsum(weights)
    for n, i in enumerate(order):
        theta = room / wsum
        if rates[i] <= theta * weights[i]:
            out[i] = rates[i]
            room -= rates[i]
            wsum -= weights[i]
        else:
            for j in order[n:]:
                out[j] = theta * weights[j]
            break
    return out


class OrderedFluidQueue(FluidQueue):
    """``FluidQueue`` whose held-back producers share the room by weight (``add(..., weight=w)``)."""

    __slots__ = ("_cur",)

    def __init__(self, *args, **kwargs):
        if kwargs.get("relax_exponential"):
            raise ValueError("relax_exponential is not supported with drain order 'ordered' (fair only)")
        super().__init__(*args, **kwargs)
        self._cur = []          # current admit rate of each entry of self._active (same order)

    def add(self, now: float, nbytes: float, rate_Bpus: float, token, weight: float = 1.0) -> None:
        if not weight > 0:
            raise ValueError(f"weight(={weight}) must be > 0")
        self.advance(now)
        self._active.append([float(nbytes), next(self._seq), rate_Bpus, token, float(weight)])   # bytes left
        self._demand += rate_Bpus
        self._set_scale()

    def _set_scale(self) -> None:
        super()._set_scale()
        act = self._active
        if self._scale >= 1.0:
            self._cur = [e[2] for e in act]
        else:
            self._cur = water_fill(self._demand * self._scale, [e[2] for e in act], [e[4] * e[2] for e in act])

    def _progress(self, step: float) -> None:
        for e, a in zip(self._active, self._cur):
            e[0] -= a * step

    def _progress_bytes(self, nbytes: float) -> None:
        total = math.fsum(self._cur)
        for e, a in zip(self._active, self._cur):
            e[0] -= nbytes * a / total

    def _pop_finished(self, res: float) -> list:
        act, keep, finished = self._active, [], []
        for e, a in zip(act, self._cur):
            if e[0] <= a * res + _ULPS * math.ulp(e[0] + e[2] * res):
                self._demand -= e[2]
                self._true_up(e[0])
                finished.append((e[1], e[3]))
            else:
                keep.append(e)
        if finished:
            act[:] = keep          # in place: settle holds this list
            self._set_scale()
        return [tok for _, tok in sorted(finished, key=lambda f: f[0])]

    def _next_finish(self) -> float:
        return min(e[0] / a for e, a in zip(self._active, self._cur))


def spread_of_k(K: int, table: dict) -> float:
    """A drain spread a(K) from a per-K table ({K: a}): linear in log2 K between the table's K, held at the
    nearest end outside them (the per-K spread law of ``benchmarks/finite_runs.py --spread-law``)."""
    table = {int(k): float(v) for k, v in table.items()}
    ks = sorted(table)
    if not ks:
        raise ValueError("table must name at least one K")
    if K <= ks[0] or K >= ks[-1]:
        return table[ks[0] if K <= ks[0] else ks[-1]]
    hi = next(i for i, k in enumerate(ks) if k >= K)
    k0, k1 = ks[hi - 1], ks[hi]
    t = (math.log2(K) - math.log2(k0)) / (math.log2(k1) - math.log2(k0))
    return float((1 - t) * table[k0] + t * table[k1])
