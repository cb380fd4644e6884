"""How far a host prediction has held at a given knee ratio: the bins of ``benchmarks/calib_knee_band25.py``'s
record (data/calibration-extra/knee-band25.json) and the lookup ``xstage model`` makes in it.

The knee ratio (V - R T_iss0(K, B)) / Q(K) (``heldout_misses.knee_ratio``) says where a lockstep burst from a drained
path sits against the outstanding capacity: below 1 it issues backpressure-free, above 1 Eq. 7's capacity branch
binds. Out of sample (committed platforms on grids they never saw, docs/calibration/h100-broad24.md), pairs near and
just past 1 are where the misses are: H200 pairs at 1.0-1.1 were off by > 15 % in every case (24 of 24), H100 pairs at
0.9-2.0 in 47-89 %, while pairs below 0.8 or above 3 were off in 0-11 %. The figures live in the record, not here;
this module only names the bins and finds a ratio's row.
"""

import math

# knee-ratio bins, (lo, hi]: the same for the record and the lookup
BINS = ((-math.inf, 0.5), (0.5, 0.8), (0.8, 0.9), (0.9, 1.0), (1.0, 1.1), (1.1, 1.25), (1.25, 1.5), (1.5, 2.0),
        (2.0, 3.0), (3.0, math.inf))


def bin_label(lo: float, hi: float) -> str:
    return f"({'-inf' if lo == -math.inf else f'{lo:g}'}, {'inf' if hi == math.inf else f'{hi:g}'}]"


def band_rows(record: dict, ratio: float | None) -> dict:
    """{gpu: the record's row of the bin holding ``ratio``} ({} where ``ratio`` is None or not finite, or no GPU of
    the record has pairs in that bin)."""
    if ratio is None or not math.isfinite(ratio):
        return {}
    out = {}
    for gpu, entry in (record.get("gpus") or {}).items():
        for row in entry.get("bins", ()):
            lo = -math.inf if row["lo"] is None else row["lo"]
            hi = math.inf if row["hi"] is None else row["hi"]
            if lo < ratio <= hi:
                out[gpu] = row
    return out
