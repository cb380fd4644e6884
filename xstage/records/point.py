"""Calibration point records: one row per measured burst configuration (``xstage calibrate``'s
points.parquet), the aggregate the platform fit reads.

For one (phase, mode, gap kind, K producers, B bytes each, gap G) point: ``T_iss_us`` is the
aggregate issue time (last issue end minus first issue start over the producers), ``period_us``
the burst period, both medians over bursts and ``trials``; ``gap_measured_us`` is the gap the
producers really left (in lockstep mode it includes the barrier wait). Written before the unit
spelling ``x(us)`` was adopted: the columns keep the ``x_us`` spelling.

Schema version 1 had no point kind: calibration points were written as kind ``summary``.
"""

KIND = "point"

COLUMNS = (
    ("phase", ""), ("target", ""), ("mode", ""), ("gap_kind", ""),
    ("producers", "count"), ("bytes_per_producer", "bytes"), ("volume_bytes", "bytes"),
    ("gap_us", "us"), ("gap_measured_us", "us"), ("T_iss_us", "us"), ("period_us", "us"),
    ("trials", "count"),
)
