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

Rule ``bracket`` (issue 15, session 12, knee14; docs/calibration/knee14.md): the ``pairs`` rule with every gap-swept
pair kept fitted. A grid that places its gap sweeps at each K's expected knee (fresh10: two adjacent-ish B per K)
then keeps the pairs that bracket that knee in the fit half, where a per-K knee read needs them; the held-out pairs
are the other pairs between each K's smallest and largest B, near-knee neighbours of the sweeps included. Per K and
per stratum (pairs with periodic points / isolated-only pairs) of n pairs, the smallest and largest B and the
swept pairs stay fitted and round(fraction x n) of the rest (at most all of them) are held out, chosen by
``numpy.random.default_rng(seed)``, K ascending, periodic stratum first -- the ``pairs`` rule's order and count, so
on a grid without gap sweeps ``bracket`` is ``pairs``. Which pairs are swept is the grid's design (K, B and the
sweep list), fixed before any measurement.
"""

import numpy as np
import pandas as pd

from xstage.sim.platform_fit import check_split_args

SPLIT_RULES = ("pairs", "sweeps", "bracket")
SWEEPS_RULE = ("whole (K, B) pairs, all gaps and modes together; the gap-sweep pairs split as one stratum across "
               "K ordered by volume K B, the smallest- and largest-volume sweep fitted and round(fraction x n) of "
               "the others held out; every other pair per K and per stratum (pairs with periodic points / "
               "isolated-only pairs), the smallest and largest B fitted and round(fraction x n) of the others held "
               "out; all chosen by one numpy.random.default_rng(seed), sweeps first")

BRACKET_RULE = ("whole (K, B) pairs, all gaps and modes together; per K and per stratum (pairs with periodic points / "
                "isolated-only pairs) of n pairs, the smallest and largest B and every gap-swept pair stay fitted and "
                "round(fraction x n) of the others (at most all) are held out, chosen by numpy.random.default_rng(seed)")


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


def split_pairs_bracket(points: pd.DataFrame, fraction: float = 0.3, seed: int = 0) -> pd.Series:
    """``fit`` / ``heldout`` per point by the ``bracket`` rule (module doc); a Series named ``split``."""
    fraction, seed = check_split_args(fraction, seed)
    K = points["producers"].astype(int).to_numpy()
    B = points["bytes_per_producer"].astype(int).to_numpy()
    pairs = sorted(set(zip(K.tolist(), B.tolist())))
    swept = {(k, b) for k, b, ph in zip(K.tolist(), B.tolist(), points["phase"]) if ph == "gap"}
    periodic = {(k, b) for k, b, m in zip(K.tolist(), B.tolist(), points["mode"]) if m != "isolated"}
    rng = np.random.default_rng(seed)
    held = set()
    for k in sorted({k for k, _ in pairs}):
        for stratum in (True, False):
            sizes = [b for kk, b in pairs if kk == k and ((kk, b) in periodic) == stratum]
            inner = [b for b in sizes[1:-1] if (k, b) not in swept]
            n = min(len(inner), int(np.floor(fraction * len(sizes) + 0.5)))
            if n:
                held.update((k, int(b)) for b in rng.choice(inner, size=n, replace=False))
    split = np.array(["heldout" if p in held else "fit" for p in zip(K.tolist(), B.tolist())])
    return pd.Series(split, index=points.index, name="split")


def split_by_rule(points: pd.DataFrame, rule: str = "pairs", fraction: float = 0.3, seed: int = 0) -> pd.Series:
    """The split of ``rule`` (``pairs``: ``platform_fit.split_pairs``; ``sweeps``: ``split_pairs_sweeps``;
    ``bracket``: ``split_pairs_bracket``)."""
    from xstage.sim.platform_fit import split_pairs
    rule = check_split_rule(rule)
    how = {"pairs": split_pairs, "sweeps": split_pairs_sweeps, "bracket": split_pairs_bracket}[rule]
    return how(points, fraction, seed)


def check_split_rule(rule, flag: str = "split_rule") -> str:
    """``rule`` checked against ``SPLIT_RULES``."""
    from xstage.errors import InputError
    if rule not in SPLIT_RULES:
        raise InputError(flag, rule, f"must be one of {', '.join(SPLIT_RULES)}")
    return rule


def rule_text(rule: str) -> str:
    """The one-line description of a split rule, as recorded in a summary's ``split.rule``."""
    from xstage.sim.platform_fit import SPLIT_RULE
    return {"pairs": SPLIT_RULE, "sweeps": SWEEPS_RULE, "bracket": BRACKET_RULE}[check_split_rule(rule)]
