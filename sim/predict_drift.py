"""How far persistent programs drift apart per wave, measured per M from a tile log, and read at any M.

The eighth FA rule (``benchmarks/predict_fa_rule8.py``) gives each Triton variant the drift its own tile logs show
at each M instead of one constant: the split-tail tile-end kernel's programs drift 0.032 / 0.047 / 0.054 of a
Q-loop per wave at 32K / 48K / 64K (mean of two runs), so a constant (the median, 0.048) over-hides at 32K and
the residual it predicts there is too small. ``per_m_drift`` is the slope of the per-wave range of mainloop ends
(full waves of whole tiles, at least three of them) over the median mainloop, per (schedule, M); ``drift_at``
reads it at any M, linear in log M between measured M and held at the ends (never extrapolated). Pure: tile
frames in, numbers out.
"""

import math

import numpy as np

from xstage.errors import InputError

MIN_WAVES = 3


def per_m_drift(tiles, min_M: int = 0) -> dict:
    """{schedule: {M: drift}} of one tile frame (``tile`` records of the Triton bench): per (schedule, M) the slope
    of the range of mainloop ends over ``seq`` (waves holding at least 90 % of the fullest wave's whole tiles;
    at least ``MIN_WAVES`` of them) over the median whole-tile mainloop; M below ``min_M`` or with too few waves
    left out. A negative slope (programs closing up) counts as 0."""
    need = ("schedule", "M", "seq", "split", "mainloop_start(us)", "mainloop_end(us)")
    missing = [c for c in need if c not in tiles.columns]
    if missing:
        raise InputError("tile frame", missing, "needs these columns")
    t = tiles[~tiles["split"].astype(bool)]
    t = t.assign(ml=t["mainloop_end(us)"] - t["mainloop_start(us)"])
    out = {}
    for (schedule, M), f in t[t["M"] >= min_M].groupby(["schedule", "M"]):
        n = f.groupby("seq").size()
        rng = f.groupby("seq")["mainloop_end(us)"].agg(lambda x: x.max() - x.min())[n >= 0.9 * n.max()]
        if len(rng) < MIN_WAVES or not float(f["ml"].median()) > 0:
            continue
        slope = np.polyfit(rng.index.to_numpy(float), rng.to_numpy(float), 1)[0] / float(f["ml"].median())
        out.setdefault(str(schedule), {})[int(M)] = max(0.0, float(slope))
    return out


def mean_drift(runs: list, aliases: dict | None = None) -> dict:
    """{schedule: {M: mean drift}} over several ``per_m_drift`` results; ``aliases`` maps a schedule name onto
    another's (the same kernel under another store name)."""
    acc = {}
    for run in runs:
        for s, d in run.items():
            s = (aliases or {}).get(s, s)
            for M, v in d.items():
                acc.setdefault(s, {}).setdefault(int(M), []).append(float(v))
    return {s: {M: float(np.mean(v)) for M, v in sorted(d.items())} for s, d in acc.items()}


def drift_at(per_m: dict, M: int) -> float:
    """The drift of ``per_m`` ({M: drift}) at ``M``: linear in log M between the measured M, the end values
    beyond them."""
    if not per_m:
        raise InputError("per_m", per_m, "must hold at least one measured M")
    if not (isinstance(M, (int, float)) and M > 0 and math.isfinite(M)):
        raise InputError("M", M, "must be a positive number")
    ms = np.array(sorted(per_m), dtype=float)
    vals = np.array([per_m[m] for m in sorted(per_m)], dtype=float)
    return float(np.interp(math.log(M), np.log(ms), vals))


def fitted_per_m(residual, measured: dict, grid) -> dict:
    """{M: drift} fitted on residuals (the ninth FA rule): per M of ``measured`` ({M: [measured residual, ...]},
    several runs at one M), the ``grid`` drift whose predictions ``residual(M, drift)`` (a list aligned with
    ``measured[M]``) have the least median |predicted - measured|; a tie goes to the smaller drift. Read the result
    at other M with ``drift_at``."""
    grid = sorted(float(d) for d in grid)
    if not grid or grid[0] < 0:
        raise InputError("grid", grid, "must hold at least one drift >= 0")
    out = {}
    for M, meas in sorted(measured.items()):
        if not len(meas):
            raise InputError("measured", M, "has no measured residual")
        errs = []
        for d in grid:
            pred = list(residual(M, d))
            if len(pred) != len(meas):
                raise InputError("residual", len(pred), f"must give one prediction per measured residual at M={M}")
            errs.append(float(np.median(np.abs(np.asarray(pred, float) - np.asarray(meas, float)))))
        out[int(M)] = grid[int(np.argmin(errs))]
    return out


def kv_head_bytes(seq_len: int, head_dim: int, elem_bytes: int = 2) -> int:
    """Bytes of one head's K and V (the tenth FA rule's interpolation variable): 2 x seq_len x head_dim x element."""
    for name, v in (("seq_len", seq_len), ("head_dim", head_dim), ("elem_bytes", elem_bytes)):
        if not (isinstance(v, (int, np.integer)) and v > 0):
            raise InputError(name, v, "must be a positive integer")
    return int(2 * seq_len * head_dim * elem_bytes)


def drift_nearest(per_x: dict, x: float) -> float:
    """The value of ``per_x`` ({x: drift}) at the key nearest ``x`` (a tie goes to the smaller key): a step between
    measured points instead of ``drift_at``'s interpolation, for a drift that jumps between two measured x."""
    if not per_x:
        raise InputError("per_x", per_x, "must hold at least one measured point")
    if not (isinstance(x, (int, float, np.integer, np.floating)) and math.isfinite(x)):
        raise InputError("x", x, "must be a finite number")
    key = min(sorted(per_x), key=lambda k: abs(float(k) - float(x)))
    return float(per_x[key])


L2_REGIMES = ("low", "band", "high")


def l2_regime(kv_bytes: int, l2_bytes: int, low_max: float = 0.4, high_min: float = 0.5) -> str:
    """Which side of the L2 one head's K/V bytes lie (the eleventh FA rule): "low" when kv_bytes <= low_max x
    l2_bytes, "high" when kv_bytes >= high_min x l2_bytes, "band" between. The H200's 60 MiB L2 is two partitions
    of about 30 MiB, so high_min 0.5 is one partition and low_max 0.4 is 0.8 of it."""
    for name, v in (("kv_bytes", kv_bytes), ("l2_bytes", l2_bytes)):
        if not (isinstance(v, (int, np.integer)) and v > 0):
            raise InputError(name, v, "must be a positive integer")
    if not (0 < low_max <= high_min):
        raise InputError("low_max", low_max, f"must lie in (0, high_min={high_min}]")
    x = float(kv_bytes) / float(l2_bytes)
    return "low" if x <= low_max else "high" if x >= high_min else "band"


def repeat_spread(values) -> dict:
    """Median, min, max, range (max - min) and count of repeated measurements of one figure (NaN left out)."""
    v = np.asarray([float(x) for x in values], dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        raise InputError("values", list(values), "must hold at least one finite number")
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
            "range": float(v.max() - v.min()), "n": int(len(v))}


STEP_BOUNDS = (384, 480)   # the twelfth FA rule's: the d 128, block_n 128 runs' 48K and 60K in K/V steps


def steps_regime(seq_len: int, block_n: int, low_max: int = STEP_BOUNDS[0], high_min: int = STEP_BOUNDS[1]) -> str:
    """Which regime the K/V steps per Q tile (seq_len // block_n, the mainloop length in steps) lie in (the twelfth
    FA rule): "low" when steps <= low_max, "high" when steps >= high_min, "band" between (``L2_REGIMES``' names)."""
    for name, v in (("seq_len", seq_len), ("block_n", block_n), ("low_max", low_max), ("high_min", high_min)):
        if not (isinstance(v, (int, np.integer)) and v > 0):
            raise InputError(name, v, "must be a positive integer")
    if seq_len % block_n:
        raise InputError("seq_len", seq_len, f"must be a multiple of block_n={block_n}")
    if low_max > high_min:
        raise InputError("low_max", low_max, f"must be <= high_min={high_min}")
    steps = seq_len // block_n
    return "low" if steps <= low_max else "high" if steps >= high_min else "band"
