"""The X-Stage as a simpy resource: a finite outstanding queue drained at a fixed rate.

``FluidXStage`` is exact for the fluid model of the paper (Sec. 3.2): producers inject at their
backpressure-free rates; accepted bytes sit in a queue of capacity Q and drain, work-conserving,
at rate R. While the queue is full and the producers together want more than R, they share R in
proportion to their rates (each slows by the same factor), so their issue stretches.

The fluid dynamics live in ``xstage.sim.fluid.FluidQueue`` (pure, simpy-free, shared with the
replay's fast engine). Between state changes every quantity is linear in time, so the queue computes
the next instant at which something happens (a producer finishes issuing, the queue fills or
empties, a coupled producer's bytes finish draining) and this wrapper schedules one simpy timeout
for it. A burst costs a handful of events, whatever its size.

``ChunkedXStage`` moves bytes in fixed chunks through a ``simpy.Container``; it is slow and only
approximately fluid, and serves as an independent cross-check.

Both offer ``issue(nbytes, rate_Bpus) -> simpy.Event`` that triggers when the sender sees the
issue end (or, with ``coupled=True``, when the producer's bytes have drained: the paper's
completion-coupled counterfactual).
"""

import simpy

from xstage.sim.fluid import FluidQueue
from xstage.sim.fluid_ordered import OrderedFluidQueue

DRAIN_ORDERS = ("fair", "ordered")


class FluidXStage:
    """``FluidQueue`` on a simpy clock: producers' issues are simpy events (``relaxing``: the relaxing
    capacity's ``relax_Bpus`` and ``floor_bytes``, ``Platform.queue_options``). ``drain_order``: ``fair`` (every
    held-back producer slowed by the same factor) or ``ordered`` (shared by the weights given to ``issue``;
    ``xstage.sim.fluid_ordered``)."""

    def __init__(self, env: simpy.Environment, drain_rate_Bpus: float, capacity_bytes: float, *,
                 coupled: bool = False, record: bool = True, drain_order: str = "fair", **relaxing):
        if drain_order not in DRAIN_ORDERS:
            raise ValueError(f"drain_order(={drain_order!r}) must be one of {', '.join(DRAIN_ORDERS)}")
        self.env = env
        cls = OrderedFluidQueue if drain_order == "ordered" else FluidQueue
        self.core = cls(drain_rate_Bpus, capacity_bytes, coupled=coupled, record=record, **relaxing)
        self.drain_rate, self.capacity, self.coupled = self.core.drain_rate, self.core.capacity, coupled
        self.log = self.core.log
        self._empty_waiters = []
        self._version = 0
        self._dirty = False

    # --- read-only state ----------------------------------------------------------------
    def _now(self):
        """The fluid core, advanced to the simpy clock."""
        self.core.advance(self.env.now)
        return self.core

    @property
    def level(self) -> float:
        """Outstanding bytes now."""
        return self._now().level

    @property
    def admitted(self) -> float:
        return self._now().admitted

    @property
    def drained(self) -> float:
        return self._now().drained

    @property
    def peak_level(self) -> float:
        return self.core.peak

    @property
    def idle_since(self) -> float:
        """When the last byte drained (nothing outstanding, nobody issuing) most recently."""
        return self.core.idle_since

    # --- producer side -------------------------------------------------------------------
    def issue(self, nbytes: float, rate_Bpus: float, hold_us: float = 0.0, weight: float = 1.0) -> simpy.Event:
        """Inject ``nbytes`` at up to ``rate_Bpus``.

        The event's value is the sender-visible issue end time (with ``coupled``, the time the bytes drained).
        It triggers ``hold_us`` after that instant: a producer's gap folded into the same event, which saves
        one simpy event per burst. ``weight``: the producer's share of the drain (drain order ``ordered`` only).
        """
        done = self.env.event()
        done.hold_us = hold_us
        if nbytes <= 0:
            self._release(done)
            return done
        self.core.add(self.env.now, nbytes, rate_Bpus, done, weight)
        self._changed()
        return done

    def when_empty(self) -> simpy.Event:
        """An event that triggers once nothing is outstanding and nobody is issuing."""
        ev = self.env.event()
        self.core.advance(self.env.now)
        if self.core.idle:
            ev.succeed()
        else:
            self._empty_waiters.append(ev)
        return ev

    # --- event plumbing ------------------------------------------------------------------
    def _changed(self) -> None:
        """Recompute once per instant, after every producer of this instant has called in."""
        if not self._dirty:
            self._dirty = True
            ev = self.env.timeout(0)
            ev.callbacks.append(self._recompute)

    def _recompute(self, _event=None) -> None:
        self._dirty = False
        released, horizon = self.core.settle(self.env.now)
        for done in released:
            self._release(done)
        if self._empty_waiters and self.core.idle:
            for ev in self._empty_waiters:
                ev.succeed()
            self._empty_waiters.clear()
        if horizon == float("inf"):
            return
        self._version += 1
        ev = self.env.timeout(horizon)
        ev.callbacks.append(lambda _e, v=self._version: v == self._version and self._recompute())

    def _release(self, done: simpy.Event) -> None:
        """Trigger ``done`` with value = now, ``done.hold_us`` later (what simpy's Timeout does)."""
        done._ok = True
        done._value = self.env.now
        self.env.schedule(done, delay=done.hold_us)


class ChunkedXStage:
    """Cross-check: bytes move in ``chunk_bytes`` pieces; Q bytes of space are a ``simpy.Container``.

    A producer makes one chunk per chunk/rate microseconds, takes space for it (waiting while the queue is
    full) and hands it to the drain server, which spends chunk/R on each chunk in FIFO order and then frees
    its space. Outstanding bytes = Q - free space.
    """

    def __init__(self, env: simpy.Environment, drain_rate_Bpus: float, capacity_bytes: float, *,
                 chunk_bytes: float = 4096, coupled: bool = False, record: bool = True):
        if chunk_bytes <= 0 or chunk_bytes > capacity_bytes:
            raise ValueError(f"chunk_bytes(={chunk_bytes}) must be > 0 and <= capacity_bytes")
        self.env = env
        self.drain_rate = float(drain_rate_Bpus)
        self.capacity = float(capacity_bytes)
        self.chunk = float(chunk_bytes)
        self.coupled = coupled
        self.space = simpy.Container(env, capacity=self.capacity, init=self.capacity)
        self.pieces = simpy.Store(env)
        self.admitted = 0.0
        self.drained = 0.0
        self.peak_level = 0.0
        self.log = ([], [], [], []) if record else None
        env.process(self._drain())

    @property
    def level(self) -> float:
        return self.capacity - self.space.level

    def issue(self, nbytes: float, rate_Bpus: float) -> simpy.Event:
        return self.env.process(self._issue(nbytes, rate_Bpus))

    def when_empty(self) -> simpy.Event:
        return self.env.process(self._wait_drained(None))

    def _wait_drained(self, mark):
        step = self.chunk / self.drain_rate
        while self.drained < (self.admitted if mark is None else mark) - 1e-6:
            yield self.env.timeout(step)

    def _issue(self, nbytes, rate):
        left = float(nbytes)
        while left > 0:
            piece = min(self.chunk, left)
            yield self.env.timeout(piece / rate)
            yield self.space.get(piece)
            self.pieces.put(piece)
            self.admitted += piece
            left -= piece
            self.peak_level = max(self.peak_level, self.level)
            self._record()
        if self.coupled:
            yield self.env.process(self._wait_drained(self.admitted))

    def _drain(self):
        while True:
            piece = yield self.pieces.get()
            yield self.env.timeout(piece / self.drain_rate)
            self.drained += piece
            yield self.space.put(piece)
            self._record()

    def _record(self):
        if self.log is not None:
            t, lvl, adm, drn = self.log
            t.append(self.env.now)
            lvl.append(self.level)
            adm.append(self.admitted)
            drn.append(self.drained)
