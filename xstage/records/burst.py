"""Burst records: one row per producer per burst of a burst experiment (``xstage sim bursts``,
``xstage calibrate``'s bursts.parquet), measured or simulated alike.

A burst is ``bytes_per_producer`` bytes issued by one producer; ``start(us)`` is when its issue
began, ``issue(us)`` how long the issue took (the X-Stage's backpressure shows here) and
``period(us)`` the time to the producer's next start. A file usually holds several experiments,
told apart by ``RUN_KEYS``.
"""

KIND = "burst"

# (column, unit): "" for labels and indices
COLUMNS = (
    ("source", ""), ("platform", ""), ("target", ""), ("mode", ""),
    ("producers", "count"), ("bytes_per_producer", "bytes"), ("gap(us)", "us"),
    ("producer", ""), ("burst", ""),
    ("start(us)", "us"), ("issue(us)", "us"), ("period(us)", "us"),
)

# the columns that name one experiment inside a file (the optional ones where present)
RUN_KEYS = ("source", "platform", "target", "mode", "producers", "bytes_per_producer", "gap(us)")
OPTIONAL_RUN_KEYS = ("phase", "gap_kind", "fma_iters", "trial")
