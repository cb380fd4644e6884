"""Calibration point records: one row per measured burst configuration (``xstage calibrate``'s
points.parquet), the aggregate the platform fit reads.

For one (phase, mode, gap kind, K producers, B bytes each, gap G) point: ``T_iss(us)`` is the
aggregate issue time (last issue end minus first issue start over the producers), ``period(us)``
the burst period, both medians over bursts and ``trials``; ``gap_measured(us)`` is the gap the
producers really left (in lockstep mode it includes the barrier wait). The microbenchmark adds
``fence(us)``, ``T_iss_producer(us)``, ``kernel(GBps)`` and ``T_iss_spread``.

Schema version 1 had no point kind: calibration points were written as kind ``summary``. Versions 1
and 2 spelt these columns ``T_iss_us``, ``volume_bytes``, ...: they are renamed on load.
"""

KIND = "point"

COLUMNS = (
    ("phase", ""), ("target", ""), ("mode", ""), ("gap_kind", ""),
    ("producers", "count"), ("bytes_per_producer", "bytes"), ("volume(bytes)", "bytes"),
    ("gap(us)", "us"), ("gap_measured(us)", "us"), ("T_iss(us)", "us"), ("period(us)", "us"),
    ("trials", "count"),
)
