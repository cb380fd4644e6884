"""Kernel records: one row per timed kernel variant of one configuration (``xstage attention
bench``, ``xstage moe bench``, ``xstage calibrate``'s copy.parquet, a replay's makespan).

``time(us)`` is the median over ``trials`` timed launches after warm-up (one deterministic trial
for the simulator); experiments add their own columns (shapes, FLOPs, quartiles, ...).
"""

KIND = "kernel"

COLUMNS = (
    ("source", ""), ("experiment", ""), ("config", ""), ("variant", ""),
    ("time(us)", "us"), ("trials", "count"),
)


def timed_row(experiment: str, config: str, variant: str, times_us, *, flops: float | None = None,
              platform: str = "", **extra) -> dict:
    """The kernel record columns of one timed variant from its per-trial times (us): median ``time(us)``,
    ``trials``, quartiles and extremes, ``compute(TFLOPs)`` when ``flops`` is given; then ``extra``."""
    import numpy as np

    from xstage.errors import InputError

    t = np.asarray(times_us, dtype=float)
    if t.size == 0:
        raise InputError("times_us", [], "must hold at least one trial")
    median = float(np.median(t))
    row = {"source": "hw", "experiment": experiment, "config": config, "variant": variant, "time(us)": median,
           "trials": int(t.size), "platform": platform}
    if flops is not None:
        row.update({"flops": flops, "compute(TFLOPs)": flops / median / 1e6})
    row.update({"time_min(us)": float(t.min()), "time_p25(us)": float(np.percentile(t, 25)),
                "time_p75(us)": float(np.percentile(t, 75)), "time_max(us)": float(t.max())})
    row.update(extra)
    return row
