"""The X-Stage as a simpy resource: a finite outstanding queue drained at a fixed rate.

``FluidXStage`` is exact for the fluid model of the paper (Sec. 3.2): producers inject at their
backpressure-free rates; accepted bytes sit in a queue of capacity Q and drain, work-conserving,
at rate R. While the queue is full and the producers together want more than R, they share R in
proportion to their rates (each slows by the same factor), so their issue stretches.

Between state changes every quantity is linear in time, so the queue computes the next instant at
which something happens (a producer finishes issuing, the queue fills or empties, a coupled
producer's bytes finish draining) and schedules one simpy timeout for it. A burst costs a handful
of events, whatever its size.

``ChunkedXStage`` moves bytes in fixed chunks through a ``simpy.Container``; it is slow and only
approximately fluid, and serves as an independent cross-check.

Both offer ``issue(nbytes, rate_Bpus) -> simpy.Event`` that triggers when the sender sees the
issue end (or, with ``coupled=True``, when the producer's bytes have drained: the paper's
completion-coupled counterfactual).
"""

import heapq
import itertools

import simpy

_EPS = 1e-9


class FluidXStage:
    def __init__(self, env: simpy.Environment, drain_rate_Bpus: float, capacity_bytes: float, *,
                 coupled: bool = False, record: bool = True):
        if drain_rate_Bpus <= 0:
            raise ValueError(f"drain_rate_Bpus(={drain_rate_Bpus}) must be > 0")
        if capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes(={capacity_bytes}) must be > 0")
        self.env = env
        self.drain_rate = float(drain_rate_Bpus)
        self.capacity = float(capacity_bytes)
        self.coupled = coupled
        self._level = 0.0
        self._admitted = 0.0   # cumulative bytes accepted into the X-Stage
        self._drained = 0.0    # cumulative bytes drained out of it
        self._vclock = 0.0     # virtual time: advances at the common slow-down factor
        self._scale = 1.0
        self._demand = 0.0     # sum of active producers' unconstrained rates
        self._active = []      # heap of (virtual finish, seq, rate, event)
        self._waiting = []     # coupled: heap of (admitted-bytes mark, seq, event)
        self._empty_waiters = []
        self._seq = itertools.count()
        self._t_last = env.now
        self._version = 0
        self._dirty = False
        self.peak_level = 0.0
        self.log = ([], [], [], []) if record else None  # time, level, admitted, drained

    # --- read-only state ----------------------------------------------------------------
    @property
    def level(self) -> float:
        """Outstanding bytes now."""
        self._advance()
        return self._level

    @property
    def admitted(self) -> float:
        self._advance()
        return self._admitted

    @property
    def drained(self) -> float:
        self._advance()
        return self._drained

    # --- producer side -------------------------------------------------------------------
    def issue(self, nbytes: float, rate_Bpus: float, hold_us: float = 0.0) -> simpy.Event:
        """Inject ``nbytes`` at up to ``rate_Bpus``.

        The event's value is the sender-visible issue end time (with ``coupled``, the time the bytes drained).
        It triggers ``hold_us`` after that instant: a producer's gap folded into the same event, which saves
        one simpy event per burst.
        """
        done = self.env.event()
        done.hold_us = hold_us
        if nbytes <= 0:
            self._release(done)
            return done
        self._advance()
        heapq.heappush(self._active, (self._vclock + nbytes / rate_Bpus, next(self._seq), rate_Bpus, done))
        self._demand += rate_Bpus
        self._changed()
        return done

    def when_empty(self) -> simpy.Event:
        """An event that triggers once nothing is outstanding and nobody is issuing."""
        ev = self.env.event()
        self._advance()
        if not self._active and self._level <= _EPS * self.capacity:
            ev.succeed()
        else:
            self._empty_waiters.append(ev)
        return ev

    # --- fluid dynamics ------------------------------------------------------------------
    def _rates(self) -> tuple[float, float]:
        admit = self._demand * self._scale
        drain = self.drain_rate if self._level > _EPS * self.capacity else min(self.drain_rate, admit)
        return admit, drain

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._t_last
        if dt <= 0:
            return
        admit, drain = self._rates()
        level = self._level + (admit - drain) * dt
        self._level = min(max(level, 0.0), self.capacity)
        self._admitted += admit * dt
        self._drained += drain * dt
        self._vclock += self._scale * dt
        self._t_last = now

    def _set_scale(self) -> None:
        full = self._level >= self.capacity * (1 - 1e-12)
        if full and self._demand > self.drain_rate:
            self._level = self.capacity
            self._scale = self.drain_rate / self._demand
        else:
            self._scale = 1.0

    def _changed(self) -> None:
        """Recompute once per instant, after every producer of this instant has called in."""
        if not self._dirty:
            self._dirty = True
            ev = self.env.timeout(0)
            ev.callbacks.append(self._recompute)

    def _recompute(self, _event=None) -> None:
        self._dirty = False
        self._advance()
        # Snap everything due within the clock's resolution, then settle; repeat while rates change.
        for _ in range(8):
            self._set_scale()
            if not self._settle():
                break
        self._set_scale()
        self._record()
        self._schedule()

    def _time_tol(self) -> float:
        return 1e-9 * max(1.0, abs(self.env.now))

    def _settle(self) -> bool:
        """Finish producers whose bytes are all in, snap the level to full/empty, release waiters.

        Everything due within the clock's resolution counts as due now. Returns True if anything changed.
        """
        tol = self._time_tol()
        changed = False
        while self._active and (self._active[0][0] - self._vclock) <= tol * self._scale:
            _, _, rate, done = heapq.heappop(self._active)
            self._demand -= rate
            changed = True
            if self.coupled:
                heapq.heappush(self._waiting, (self._admitted, next(self._seq), done))
            else:
                self._release(done)
        if not self._active:
            self._demand = 0.0
        admit, drain = self._rates()
        if 0.0 < self._level < self.capacity and admit > drain and \
                (self.capacity - self._level) <= tol * (admit - drain):
            self._level = self.capacity
            changed = True
        if 0.0 < self._level and (self._level <= _EPS * self.capacity or
                                  (drain > admit and self._level <= tol * (drain - admit))):
            self._level = 0.0
            changed = True
        while self._waiting and self._waiting[0][0] - self._drained <= tol * max(drain, self.drain_rate):
            self._release(heapq.heappop(self._waiting)[2])
        if self._empty_waiters and not self._active and self._level == 0.0:
            for ev in self._empty_waiters:
                ev.succeed()
            self._empty_waiters.clear()
        return changed

    def _release(self, done: simpy.Event) -> None:
        """Trigger ``done`` with value = now, ``done.hold_us`` later (what simpy's Timeout does)."""
        done._ok = True
        done._value = self.env.now
        self.env.schedule(done, delay=done.hold_us)

    def _schedule(self) -> None:
        admit, drain = self._rates()
        horizon = float("inf")
        if self._active:
            horizon = (self._active[0][0] - self._vclock) / self._scale
        if admit > drain and self._level < self.capacity:
            horizon = min(horizon, (self.capacity - self._level) / (admit - drain))
        elif drain > admit and self._level > 0.0:
            horizon = min(horizon, self._level / (drain - admit))
        if self._waiting and drain > 0:
            horizon = min(horizon, max(self._waiting[0][0] - self._drained, 0.0) / drain)
        if horizon == float("inf"):
            return
        # never schedule below the clock's resolution: that would not advance time
        horizon = max(horizon, self._time_tol())
        self._version += 1
        ev = self.env.timeout(horizon)
        ev.callbacks.append(lambda _e, v=self._version: v == self._version and self._recompute())

    def _record(self) -> None:
        if self._level > self.peak_level:
            self.peak_level = self._level
        if self.log is not None:
            t, lvl, adm, drn = self.log
            if t and t[-1] == self.env.now:
                lvl[-1], adm[-1], drn[-1] = self._level, self._admitted, self._drained
            else:
                t.append(self.env.now)
                lvl.append(self._level)
                adm.append(self._admitted)
                drn.append(self._drained)


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
