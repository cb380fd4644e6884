"""A test double for ``torch.cuda.Event`` on a fake clock, for the timing code's tests without a GPU: a fake launch
advances ``FakeEvent.clock_ms`` and ``record`` reads it."""


class FakeEvent:
    """A CUDA event on a fake clock that the fake launches advance (ms)."""

    clock_ms = 0.0

    def __init__(self, enable_timing=True):
        self.t = None

    def record(self):
        self.t = FakeEvent.clock_ms

    def elapsed_time(self, other):
        return other.t - self.t
