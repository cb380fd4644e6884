"""One microbenchmark configuration (``BurstSpec``), validated at construction, and the kernel's modes.

``MODES`` (index = the kernel's mode argument) and ``GAP_KINDS`` are described in ``runner.py``.
"""

from dataclasses import dataclass

from xstage.errors import InputError, require_int, require_positive

MODES = ("free", "isolated", "periodic", "aligned")   # index = the kernel's mode argument
GAP_KINDS = ("spin", "clock", "fma")


@dataclass(frozen=True)
class BurstSpec:
    """One microbenchmark configuration."""
    producers: int
    bytes_per_producer: int
    gap_us: float = 0.0          # spin / clock gaps (ignored for fma)
    mode: str = "periodic"
    gap_kind: str = "spin"
    fma_iters: int = 0           # fma gap: iterations of 4 FMA chains per thread
    bursts: int = 32
    trials: int = 3
    warmup: int = 1
    threads: int = 512
    settle_us: float = 10.0      # isolated mode: wait after the drain barrier
    end_fence: bool = False      # not isolated, zero gap: the last burst fences, records its drain (``end_fence(us)``)

    def __post_init__(self):
        object.__setattr__(self, "producers", require_int("producers", self.producers))
        b = require_int("bytes_per_producer", self.bytes_per_producer, minimum=16)
        if b % 16:
            raise InputError("bytes_per_producer", b, "must be a multiple of 16 (16-byte stores)")
        object.__setattr__(self, "bytes_per_producer", b)
        require_positive("gap_us", self.gap_us, allow_zero=True)
        if self.gap_us > 100_000:
            raise InputError("gap_us", self.gap_us, "must be <= 100000 (0.1 s)")
        if self.mode not in MODES:
            raise InputError("mode", self.mode, f"must be one of {', '.join(MODES)}")
        if self.gap_kind not in GAP_KINDS:
            raise InputError("gap_kind", self.gap_kind, f"must be one of {', '.join(GAP_KINDS)}")
        require_int("fma_iters", self.fma_iters, minimum=0)
        require_int("bursts", self.bursts, minimum=2)
        require_int("trials", self.trials, minimum=1)
        require_int("warmup", self.warmup, minimum=0)
        t = require_int("threads", self.threads, minimum=32)
        if t > 1024 or t % 32:
            raise InputError("threads", t, "must be a multiple of 32 and <= 1024")
        require_positive("settle_us", self.settle_us, allow_zero=True)
        if not isinstance(self.end_fence, bool):
            raise InputError("end_fence", self.end_fence, "must be True or False")
        if self.end_fence and self.mode == "isolated":
            raise InputError("end_fence", self.end_fence, "applies to modes free, periodic, aligned (isolated "
                             "mode fences every burst)")
        if self.end_fence and (self.gap_us > 0 if self.gap_kind != "fma" else self.fma_iters > 0):
            raise InputError("end_fence", self.end_fence, "needs a zero gap (the fence runs after the last burst's "
                             f"gap; gap_us={self.gap_us}, fma_iters={self.fma_iters})")

    @property
    def volume_bytes(self) -> int:
        return self.producers * self.bytes_per_producer

    @property
    def words_per_producer(self) -> int:
        return self.bytes_per_producer // 16
