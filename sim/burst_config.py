"""One burst experiment's configuration (``BurstConfig``), validated at construction; moved out of
``xstage.sim.bursts`` (which re-exports it) when the ``lockstep`` mode came in.

``lockstep`` (issue 15, item 4): the microbenchmark's lockstep protocol. Every burst starts from a drained
path (the barrier's fence waits for the previous burst's stores), so its issue time is the isolated one; the
barrier runs while the path drains, so the next burst starts at max(drained, issue end + ``barrier_us``) + G.
A drain-bound lockstep period is V / R (isolated mode adds the barrier after the drain).
"""

from dataclasses import dataclass

import numpy as np

from xstage.errors import InputError, require_int, require_positive
from xstage.sim.xqueue import DRAIN_ORDERS

MODES = ("periodic", "isolated", "local", "coupled", "lockstep")
ENGINES = ("auto", "exact", "simpy")


@dataclass(frozen=True)
class BurstConfig:
    producers: int
    bytes_per_producer: int
    gap_us: float
    bursts: int = 200
    mode: str = "periodic"
    queue: str = "fluid"          # fluid | chunked
    chunk_bytes: int = 4096
    capacity_bytes: float | None = None  # override Q(K) (used by calibration sweeps)
    skip: int | None = None       # bursts left out of the summary medians; None: the warm-up (steady-state rule)
    engine: str = "auto"          # auto | exact | simpy
    drain_order: str = "fair"     # fair | ordered (fixed per-producer shares; simpy fluid queue only)
    drain_spread: float | None = None   # ordered: a in w_p = exp(-a p / (K - 1)); required there, else None
    barrier_us: float | None = None     # lockstep: the barrier's own time (us); required there, else None

    def __post_init__(self):
        object.__setattr__(self, "producers", require_int("producers", self.producers))
        require_positive("bytes_per_producer", self.bytes_per_producer)
        require_positive("gap_us", self.gap_us, allow_zero=True)
        object.__setattr__(self, "bursts", require_int("bursts", self.bursts, minimum=2))
        if self.mode not in MODES:
            raise InputError("mode", self.mode, f"must be one of {', '.join(MODES)}")
        if self.queue not in ("fluid", "chunked"):
            raise InputError("queue", self.queue, "must be fluid or chunked")
        require_positive("chunk_bytes", self.chunk_bytes)
        if self.capacity_bytes is not None:
            require_positive("capacity_bytes", self.capacity_bytes)
        if self.skip is not None:
            skip = require_int("skip", self.skip, minimum=0)
            if skip > self.bursts - 2:
                raise InputError("skip", self.skip, f"must leave at least 2 of the {self.bursts} bursts (<= "
                                 f"{self.bursts - 2})")
            object.__setattr__(self, "skip", skip)
        if self.mode == "lockstep":
            if self.barrier_us is None:
                raise InputError("barrier_us", None, "is required with mode lockstep (the barrier's time, us >= 0)")
            require_positive("barrier_us", self.barrier_us, allow_zero=True)
            object.__setattr__(self, "barrier_us", float(self.barrier_us))
        elif self.barrier_us is not None:
            raise InputError("barrier_us", self.barrier_us, "applies to mode lockstep only")
        if self.engine not in ENGINES:
            raise InputError("engine", self.engine, f"must be one of {', '.join(ENGINES)}")
        if self.engine == "exact" and self.queue != "fluid":
            raise InputError("engine", self.engine, "needs queue fluid (the chunked queue runs on simpy)")
        if self.drain_order not in DRAIN_ORDERS:
            raise InputError("drain_order", self.drain_order, f"must be one of {', '.join(DRAIN_ORDERS)}")
        if self.drain_order == "fair":
            if self.drain_spread is not None:
                raise InputError("drain_spread", self.drain_spread, "applies to drain_order ordered only")
        else:
            if self.drain_spread is None:
                raise InputError("drain_spread", None, "is required with drain_order ordered (a >= 0)")
            require_positive("drain_spread", self.drain_spread, allow_zero=True)
            object.__setattr__(self, "drain_spread", float(self.drain_spread))
            if self.engine == "exact" or self.queue != "fluid":
                field, value = ("engine", self.engine) if self.engine == "exact" else ("queue", self.queue)
                raise InputError(field, value, "has no drain order ordered: use engine simpy, queue fluid")

    @property
    def resolved_engine(self) -> str:
        if self.engine != "auto":
            return self.engine
        return "exact" if self.queue == "fluid" and self.drain_order == "fair" else "simpy"

    def weights(self) -> list[float]:
        """Each producer's share of the drain while held back (all 1 for ``fair``)."""
        K = self.producers
        if self.drain_order == "fair":
            return [1.0] * K
        return [float(np.exp(-self.drain_spread * p / max(K - 1, 1))) for p in range(K)]
