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
