"""A held-out split that keeps the gap sweeps' extremes fitted (``sweeps`` rule; issue 15, session 7).

``xstage.sim.platform_fit.split_pairs`` (rule ``pairs``) splits whole (K, B) pairs per K, the gap-sweep pairs
among the others. A gap sweep (one pair, twelve gaps from zero to far beyond the drain time) is the only part
of a grid that shows how the X-Stage's capacity behaves while it holds the producers back over many bursts, so
a schema-2 fit's relaxation rate rho is pinned almost only by the sweeps whose volume exceeds what the path
absorbs in one issue (V - R T_iss0 > Q(K)). A grid has few of those (the fresh grid: 3 of 5 sweeps), and the
``pairs`` rule can hold out all but one of them (fresh host: 2 of 3), leaving rho to one sweep.

Rule ``sweeps``: the gap-sweep pairs (pairs with ``phase == "gap"`` points) are split as one stratum across K,
ordered by volume K B: the smallest- and the largest-volume sweep always stay fitted (held-out sweeps are
interpolations in volume, as held-out pairs are interpolations in B under ``pairs``), and round(fraction x n)
of the others are held out, chosen by ``numpy.random.default_rng(seed)``. The capacity-limited sweeps are the
large-volume ones, so the largest (the one furthest into the capacity-limited regime) is always fitted; which
sweeps are capacity-limited is not read from the measurement (the rule uses the grid's design, K and B, only).
Every other pair is split by the ``pairs`` rule (per K and stratum, its extremes in B fitted), with the same
generator continued after the sweeps.
"""

import numpy as np
import pandas as pd

from xstage.sim.platform_fit import check_split_args

SPLIT_RULES = ("pairs", "sweeps")
SWEEPS_RULE = ("whole (K, B) pairs, all gaps and modes together; the gap-sweep pairs split as one stratum across "
               "K ordered by volume K B, the smallest- and largest-volume sweep fitted and round(fraction x n) of "
               "the others held out; every other pair per K and per stratum (pairs with periodic points / "
               "isolated-only pairs), the smallest and largest B fitted and round(fraction x n) of the others held "
               "out; all chosen by one numpy.random.default_rng(seed), sweeps first")


def _held_of(candidates, n_total, fraction, rng) -> set:
    inner = candidates[1:-1]
    n = min(len(inner), int(np.floor(fraction * n_total + 0.5)))
    if not n:
        return set()
    picks = rng.choice(len(inner), size=n, replace=False)
    return {inner[int(i)] for i in picks}


def split_pairs_sweeps(points: pd.DataFrame, fraction: float = 0.3, seed: int = 0) -> pd.Series:
    """``fit`` / ``heldout`` per point by the ``sweeps`` rule (module doc); a Series named ``split``."""
    fraction, seed = check_split_args(fraction, seed)
    K = points["producers"].astype(int).to_numpy()
    B = points["bytes_per_producer"].astype(int).to_numpy()
    pairs = sorted(set(zip(K.tolist(), B.tolist())))
    sweeps = sorted({(k, b) for k, b, ph in zip(K.tolist(), B.tolist(), points["phase"]) if ph == "gap"},
                    key=lambda p: (p[0] * p[1], p))
    periodic = {(k, b) for k, b, m in zip(K.tolist(), B.tolist(), points["mode"]) if m != "isolated"}
    rng = np.random.default_rng(seed)
    held = _held_of(sweeps, len(sweeps), fraction, rng)
    rest = [p for p in pairs if p not in set(sweeps)]
    for k in sorted({k for k, _ in rest}):
        for stratum in (True, False):
            sizes = [(kk, b) for kk, b in rest if kk == k and ((kk, b) in periodic) == stratum]
            held |= _held_of(sizes, len(sizes), fraction, rng)
    split = np.array(["heldout" if p in held else "fit" for p in zip(K.tolist(), B.tolist())])
    return pd.Series(split, index=points.index, name="split")


def split_by_rule(points: pd.DataFrame, rule: str = "pairs", fraction: float = 0.3, seed: int = 0) -> pd.Series:
    """The split of ``rule`` (``pairs``: ``platform_fit.split_pairs``; ``sweeps``: ``split_pairs_sweeps``)."""
    from xstage.errors import InputError
    from xstage.sim.platform_fit import split_pairs
    if rule not in SPLIT_RULES:
        raise InputError("split_rule", rule, f"must be one of {', '.join(SPLIT_RULES)}")
    return split_pairs(points, fraction, seed) if rule == "pairs" else split_pairs_sweeps(points, fraction, seed)
