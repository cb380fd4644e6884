"""Which held-out (K, B) pairs a calibration misses, and where they sit against the knee.

The held-out median / p90 of ``check_and_summarize`` say how far the model is off; they do not say where. On the
H200's host path the misses have two homes (docs/calibration/fresh14.md): (a) the knee, where a lockstep burst's
excess over the drain during its issue, V - R T_iss0(K, B) with V = K B, is about the outstanding capacity Q(K)
(fresh14 seed 0: (79, 29 KiB), knee ratio 0.98, -34.5 %), and (b) small K with B above the issue law's store buffer
b0 (fresh14 seed 0: b0 fitted at 32 KiB, (19, 43 KiB) +113.7 %, knee ratio 0.52). ``heldout_misses`` lists every
held-out lockstep periodic pair with a point off by more than ``MISS_LIMIT`` (the issue-15 p90 target), its
median error and its knee ratio under the fitted platform, worst first; ``check_and_summarize`` puts the list in
the summary (``heldout_misses``, ``heldout_n_miss_pairs``, and ``heldout_n_checked_pairs``: how many held-out
pairs were looked at, the misses' denominator).

``missed_pairs`` is the selection the study scripts made (``benchmarks/calib_knee10.py``, moved here; calib_knee12,
13, 14 and 19 import it from here): the same pairs, K then B ascending, with their check rows.
"""

import math

import numpy as np

MISS_LIMIT = 0.15   # a point off by more than this |rel. error| of T_iss makes its pair a miss
# issue 15's held-out targets on lockstep periodic points: median and p90 |relative error| of T_iss and of the period
TARGETS = (("heldout_median_rel_err_T_iss", 0.05), ("heldout_p90_rel_err_T_iss", 0.15),
           ("heldout_median_rel_err_period", 0.05), ("heldout_p90_rel_err_period", 0.15))


def meets_targets(figures: dict) -> bool | None:
    """Whether held-out figures (``platform_fit.split_errors``) meet every one of ``TARGETS``; None where one of them
    is missing or not a number (no held-out lockstep point)."""
    values = [figures.get(key) for key, _ in TARGETS]
    if any(v is None or not math.isfinite(v) for v in values):
        return None
    return all(v <= limit for v, (_, limit) in zip(values, TARGETS))


def verdict(figures: dict, label: str = "held-out check") -> str | None:
    """One line for a person: ``label``, then the check against issue 15's targets, naming each figure that misses
    (``figures``: ``heldout_*`` keys, as ``meets_targets`` reads them)."""
    meets = meets_targets(figures)
    if meets is None:
        return None
    if meets:
        return f"{label}: meets the targets (median <= 5 %, p90 <= 15 % of T_iss and of the period)"
    misses = [f"{key[len('heldout_'):]} {figures[key]:.1%} > {limit:.0%}" for key, limit in TARGETS
              if figures[key] > limit]
    return f"{label}: misses the targets: " + ", ".join(misses)


def periodic_pairs(check, split, heldout_only: bool = True):
    """(K, B, the pair's check rows with their ``split``, its T_iss relative errors) of every lockstep periodic pair
    of a model check with a T_iss error, K then B ascending; ``heldout_only``: the held-out pairs only (the pairs
    ``missed_pairs`` chooses from), else every pair (``compare.heldout_frames.folder_pairs``)."""
    s = np.asarray(split).astype(str)
    keep = (check["mode"] == "periodic").to_numpy() & ((s == "heldout") if heldout_only else True)
    per = check.assign(split=s)[keep]
    for (k, b), g in per.groupby(["producers", "bytes_per_producer"]):
        e = g["rel_err_T_iss"].dropna().to_numpy(float)
        if e.size:
            yield int(k), int(b), g, e


def checked_pairs(check, split) -> int:
    """How many held-out pairs ``missed_pairs`` looked at (lockstep periodic pairs with a T_iss error): the
    denominator of ``heldout_n_miss_pairs``. Pairs held out with only isolated points are not among them."""
    return sum(1 for _ in periodic_pairs(check, split))


def missed_pairs(check, split, limit: float = MISS_LIMIT, heldout_only: bool = True):
    """The held-out lockstep periodic pairs of a model check with a point off by more than ``limit``:
    (K, B, the pair's check rows, its T_iss relative errors), K then B ascending (``heldout_only=False``: every
    pair's)."""
    for k, b, g, e in periodic_pairs(check, split, heldout_only):
        if (np.abs(e) > limit).any():
            yield k, b, g, e


def knee_ratio(platform, producers: int, bytes_per_producer: float) -> float | None:
    """(V - R T_iss0(K, B)) / Q(K), V = K B, under ``platform``'s lockstep law (``issue_time0_us``,
    ``drain_rate_Bpus``, ``capacity_bytes``): above 1 a lockstep burst from a drained path fills the X-Stage
    before its issue ends (Eq. 7's capacity branch binds). This is the pair's position, not the gate of
    ``two-stage-kneek``, which sits at r(K) (``Platform.lockstep_knee_bytes``). None where Q(K) is not a positive
    finite number."""
    k, b = int(producers), float(bytes_per_producer)
    q = platform.capacity_bytes(k)
    if not (math.isfinite(q) and q > 0):
        return None
    ratio = (k * b - platform.drain_rate_Bpus * platform.issue_time0_us(k, b)) / q
    return float(ratio) if math.isfinite(ratio) else None


def heldout_misses(check, split, platform, limit: float = MISS_LIMIT, heldout_only: bool = True) -> list[dict]:
    """Every held-out lockstep periodic pair with a point off by more than ``limit`` (``missed_pairs``), as
    {producers, bytes_per_producer, median_rel_err_T_iss, n_off, n_points, knee_ratio}, by |median error|
    descending (ties: K then B ascending). ``n_off`` of ``n_points`` points are off by more than ``limit``;
    the pair's median may be within it. ``heldout_only=False``: every pair (``xstage.sim.carried``)."""
    rows = [{"producers": k, "bytes_per_producer": b, "median_rel_err_T_iss": float(np.median(e)),
             "n_off": int((np.abs(e) > limit).sum()), "n_points": int(e.size),
             "knee_ratio": knee_ratio(platform, k, b)}
            for k, b, _, e in missed_pairs(check, split, limit, heldout_only)]
    return sorted(rows, key=lambda r: -abs(r["median_rel_err_T_iss"]))
