"""The fluid X-Stage as a pure state machine: no simpy, no clock of its own; the caller owns time.

This is the one implementation of the paper's fluid queue (Sec. 3.2). ``FluidXStage``
(``xstage.sim.xqueue``) wraps it for simpy processes; the replay's fast engine
(``xstage.sim.replay_engines.run_fast``) drives it from its own event heap. Protocol:

    q.add(now, nbytes, rate, token)      a producer starts injecting ``nbytes`` at up to ``rate``
    released, horizon = q.settle(now)    after every producer of this instant called ``add``: the tokens
                                         whose issue ended (coupled: whose bytes drained) at ``now``, and
                                         the time until the next state change (``inf`` = nothing pending)

Between state changes everything is linear. ``advance`` is exact for any step: if the step crosses the
instant the queue fills or empties it splits there, so no byte is created or lost by a clamp. The only
tolerance is the clock's own resolution (a few ulps of ``now``): anything due sooner than the clock can
express is due now, and every such snap is booked as bytes (a snap to full admits the missing bytes, a
snap to empty drains the rest), so ``admitted == drained + level`` holds at every instant, to rounding.
The virtual clock (per-unit-rate progress of the producers) restarts at 0 whenever nobody issues, so its
resolution does not decay with the length of a run.

Relaxing capacity (platform schema 2, ``relax_Bpus`` = rho and ``floor_bytes``): while the queue is full
and the producers are held back, the capacity shrinks at rho from its ceiling (``capacity_bytes``)
towards ``floor_bytes``, so the producers get R - rho in; when the queue empties it is back at the
ceiling. Still piecewise linear: a step also splits where the capacity reaches its floor. Without
``relax_Bpus`` none of this code runs.

Exponential relaxation (``relax_exponential``, ``Platform.capacity_relax_exponential``): while held back the
capacity C falls as dC/dt = -rho (C - floor) / (ceiling - floor), so over a step s of a held stretch it goes from
c to c exp(-s / tau) above the floor (tau = (ceiling - floor) / rho) and R s - c (1 - exp(-s / tau)) gets in -- both
exact; the producers get R - rho (C - floor) / (ceiling - floor), which grows back toward R, so a held stretch ends
where that reaches their demand (if their demand is below R), and a producer's finish inside it is the root of
``model_two_stage.exponential_fill_time_us``. The floor is approached, never reached. Only the fair drain order.
"""

import heapq
import itertools
import math

from xstage.sim.model_two_stage import exponential_fill_time_us

_ULPS = 8.0   # clock resolution in units in the last place of max(now, 1)


class FluidQueue:
    __slots__ = ("drain_rate", "capacity", "coupled", "level", "peak", "idle_since", "log", "relax", "floor",
                 "ceiling", "exponential", "_adm", "_adm_lo", "_drn", "_drn_lo", "_vclock", "_scale", "_demand", "_active",
                 "_waiting", "_seq", "_t")

    def __init__(self, drain_rate_Bpus: float, capacity_bytes: float, *, coupled: bool = False,
                 record: bool = True, relax_Bpus: float | None = None, floor_bytes: float | None = None,
                 relax_exponential: bool = False):
        if not drain_rate_Bpus > 0:
            raise ValueError(f"drain_rate_Bpus(={drain_rate_Bpus}) must be > 0")
        if not capacity_bytes > 0:
            raise ValueError(f"capacity_bytes(={capacity_bytes}) must be > 0")
        self.drain_rate, self.capacity, self.coupled = float(drain_rate_Bpus), float(capacity_bytes), coupled
        self.relax = self.floor = None
        self.ceiling = self.capacity
        if relax_Bpus is not None:
            if not 0 < relax_Bpus < drain_rate_Bpus:
                raise ValueError(f"relax_Bpus(={relax_Bpus}) must be > 0 and < drain_rate_Bpus")
            if floor_bytes is None or not 0 < floor_bytes <= capacity_bytes:
                raise ValueError(f"floor_bytes(={floor_bytes}) must be > 0 and <= capacity_bytes")
            self.relax, self.floor = float(relax_Bpus), float(floor_bytes)
        elif relax_exponential:
            raise ValueError("relax_exponential needs relax_Bpus (the relaxing capacity it shapes)")
        self.exponential = bool(relax_exponential)
        self.level = self.peak = 0.0
        self._adm = self._adm_lo = self._drn = self._drn_lo = 0.0   # compensated (Neumaier) running sums
        self.idle_since = 0.0   # when nothing was last outstanding and nobody issuing (the last byte drained)
        self.log = ([], [], [], []) if record else None   # time, level, admitted, drained
        self._vclock, self._scale, self._demand = 0.0, 1.0, 0.0
        self._active = []       # heap of (virtual finish, seq, rate, token)
        self._waiting = []      # coupled: heap of (admitted-bytes mark, seq, token)
        self._seq = itertools.count()
        self._t = 0.0

    @property
    def admitted(self) -> float:
        """Bytes accepted into the X-Stage so far."""
        return self._adm + self._adm_lo

    @property
    def drained(self) -> float:
        """Bytes drained out of it so far."""
        return self._drn + self._drn_lo

    def _book(self, admitted: float, drained: float) -> None:
        """Add to the running sums without losing the low-order bits (conservation over 1e12 bytes)."""
        if admitted:
            s = self._adm + admitted
            self._adm_lo += (self._adm - s) + admitted if self._adm >= admitted else (admitted - s) + self._adm
            self._adm = s
        if drained:
            s = self._drn + drained
            self._drn_lo += (self._drn - s) + drained if self._drn >= drained else (drained - s) + self._drn
            self._drn = s

    def _true_up(self, owed: float) -> None:
        """A producer finishing within the clock's resolution of its due instant: book the bytes it still
        owed (or, finishing a hair late, gave too many) so that it issued exactly its ``nbytes``. Anything
        this pushes past full or below empty counts as drained in the same instant; a hair given too many while
        a relaxing queue is full comes off what drained, so that it stays full (with R - rho < demand < R, a
        level a hair under full would release the producers, full holds them: the hair must not choose; a
        fixed capacity snaps back to full in the same instant, so it is left as it was)."""
        if not owed:
            return
        self._book(owed, 0.0)
        if owed < 0.0 and self.relax is not None and self.level >= self.capacity:
            self._book(0.0, owed)
            return
        level = self.level + owed
        if level > self.capacity:
            self._book(0.0, level - self.capacity)
            level = self.capacity
        elif level < 0.0:
            self._book(0.0, level)
            level = 0.0
        self.level = level

    @property
    def idle(self) -> bool:
        """Nothing outstanding and nobody issuing."""
        return not self._active and self.level == 0.0

    def add(self, now: float, nbytes: float, rate_Bpus: float, token, weight: float = 1.0) -> None:
        """``weight``: the producer's share of the drain while held back; only ``OrderedFluidQueue`` reads it."""
        self.advance(now)
        heapq.heappush(self._active, (self._vclock + nbytes / rate_Bpus, next(self._seq), rate_Bpus, token))
        self._demand += rate_Bpus

    # --- per-producer progress (fair: one virtual clock; OrderedFluidQueue overrides) ------
    def _progress(self, step: float) -> None:
        self._vclock += self._scale * step

    def _progress_bytes(self, nbytes: float) -> None:
        """The producers got ``nbytes`` in at once (a snap to full), shared as their rates are."""
        self._vclock += nbytes / self._demand

    def _pop_finished(self, res: float) -> list:
        """Tokens whose issue ends within the clock's resolution ``res`` of now (their owed bytes booked)."""
        active, finished = self._active, []
        vtol = self._scale * res + _ULPS * math.ulp(self._vclock)
        while active and active[0][0] - self._vclock <= vtol:
            vfinish, _, rate, token = heapq.heappop(active)
            self._demand -= rate
            self._true_up(rate * (vfinish - self._vclock))
            finished.append(token)
        return finished

    def _next_finish(self) -> float:
        return (self._active[0][0] - self._vclock) / self._scale

    # --- dynamics -------------------------------------------------------------------------
    def _rates(self) -> tuple[float, float]:
        admit = self._demand * self._scale
        return admit, (self.drain_rate if self.level > 0.0 else min(self.drain_rate, admit))

    def _shrink(self) -> float:
        """Rate at which the capacity falls while the queue is full (relaxing capacity), else 0; exponential:
        rho (C - floor) / (ceiling - floor), the rate now."""
        if self.relax is None or not self.capacity > self.floor:
            return 0.0
        if self.exponential:
            return self.relax * (self.capacity - self.floor) / (self.ceiling - self.floor)
        return self.relax

    def _tau(self) -> float:
        """Exponential relaxation's time constant, (ceiling - floor) / rho."""
        return (self.ceiling - self.floor) / self.relax

    def _release_in(self) -> float:
        """Exponential relaxation, held back: the time until the producers' room, R - rho (C - floor) /
        (ceiling - floor), reaches their demand (inf when their demand is at least R)."""
        slack = (self.drain_rate - self._demand) * self._tau()   # C - floor at which the room equals the demand
        if not slack > 0.0:
            return math.inf
        c = self.capacity - self.floor
        return self._tau() * math.log(c / slack) if c > slack else 0.0

    def _set_scale(self) -> None:
        full = self.level >= self.capacity
        room = self.drain_rate - self._shrink() if self.relax is not None else self.drain_rate
        if self.exponential and full and self._demand > room and self._release_in() == 0.0:
            room = self._demand                                # at the release point within rounding: let go
        self._scale = room / self._demand if full and self._demand > room else 1.0

    def advance(self, now: float) -> None:
        """Move the state to ``now`` exactly, splitting the step where the queue fills or empties."""
        dt = now - self._t
        if dt <= 0.0:
            return
        self._t = now
        if self.relax is not None:
            self._advance_relaxing(now, dt)
            return
        while dt > 0.0:
            admit, drain = self._rates()
            net = admit - drain
            if net > 0.0 and self.level < self.capacity:
                seg, edge = (self.capacity - self.level) / net, self.capacity
            elif net < 0.0 and self.level > 0.0:
                seg, edge = self.level / -net, 0.0
            else:
                seg = math.inf
            step = dt if dt < seg else seg
            self._book(admit * step, drain * step)
            self._progress(step)
            if step < seg:
                was = self.level
                self.level = min(max(self.level + net * step, 0.0), self.capacity)   # rounding only
                if self.level == 0.0 < was and not self._active:   # emptied by the rounding: the last byte
                    self.idle_since = now
                return
            self.level = edge
            self._set_scale()
            if edge == 0.0 and not self._active:
                self.idle_since = now - (dt - step)
            dt -= step

    def _advance_relaxing(self, now: float, dt: float) -> None:
        """``advance`` with a relaxing capacity: while held back, level and capacity fall together at rho
        until the floor; back at the ceiling when the queue empties."""
        while dt > 0.0:
            admit, drain = self._rates()
            net = admit - drain
            held = self._scale < 1.0 and self.level >= self.capacity
            if held and self.exponential:
                dt = self._advance_exponential_held(now, dt)
                continue
            shrink = self._shrink() if held else 0.0
            if held:
                seg, edge = ((self.capacity - self.floor) / shrink if shrink > 0 else math.inf), "floor"
            elif net > 0.0 and self.level < self.capacity:
                seg, edge = (self.capacity - self.level) / net, "full"
            elif net < 0.0 and self.level > 0.0:
                seg, edge = self.level / -net, "empty"
            else:
                seg, edge = math.inf, None
            step = dt if dt < seg else seg
            self._book(admit * step, drain * step)
            self._progress(step)
            if held:
                self.capacity = max(self.capacity - shrink * step, self.floor)
                self.level = self.capacity
            if step < seg:
                if not held:
                    was = self.level
                    self.level = min(max(self.level + net * step, 0.0), self.capacity)
                    if self.level == 0.0 < was:
                        self.capacity = self.ceiling
                        if not self._active:
                            self.idle_since = now
                return
            if edge == "floor":
                self.capacity = self.level = self.floor
            elif edge == "full":
                self.level = self.capacity
            else:
                self.level, self.capacity = 0.0, self.ceiling
                if not self._active:
                    self.idle_since = now - (dt - step)
            self._set_scale()
            dt -= step

    def _advance_exponential_held(self, now: float, dt: float) -> float:
        """One stretch of ``_advance_relaxing`` held back under exponential relaxation (module doc): up to ``dt`` or
        to where the room reaches the demand (then the producers are let go: scale 1). Returns the time left."""
        seg = self._release_in()
        step = dt if dt < seg else seg
        tau, c = self._tau(), self.capacity - self.floor
        fell = -c * math.expm1(-step / tau)                    # c (1 - exp(-step / tau)), exact for small steps
        admitted = self.drain_rate * step - fell
        self._book(admitted, self.drain_rate * step)
        self._vclock += admitted / self._demand                # fair progress: every producer the same share
        self.capacity = self.level = max(self.capacity - fell, self.floor)
        if step < seg:
            return 0.0
        self._scale = 1.0                                      # the room has reached the demand
        return dt - step

    def settle(self, now: float):
        """Apply everything due at ``now``; return (released tokens, time until the next change)."""
        self.advance(now)
        res = _ULPS * math.ulp(max(abs(now), 1.0))
        R = self.drain_rate
        released = []
        active, waiting = self._active, self._waiting
        was_idle = self.idle
        changed = True
        while changed:
            changed = False
            finished = self._pop_finished(res)
            if finished:
                changed = True
                if self.coupled:   # each waits until the bytes admitted by now have drained
                    mark = self._adm + self._adm_lo
                    for token in finished:
                        heapq.heappush(waiting, (mark, next(self._seq), token))
                else:
                    released.extend(finished)
            if not active:
                self._demand, self._vclock = 0.0, 0.0
            self._set_scale()
            admit, drain = self._rates()
            if self.relax is not None and self.floor < self.capacity <= self.floor + self.relax * res:
                if self.level > self.floor:        # within the clock's resolution of the floor: there now
                    self._book(0.0, self.level - self.floor)
                    self.level = self.floor
                self.capacity = self.floor
                self._set_scale()
                changed = True
            Q = self.capacity                      # constant unless the capacity relaxes
            if admit > drain and self.level < Q and Q - self.level <= (admit - drain) * res:
                missing = Q - self.level           # admitted now: the producers get these bytes in
                self._book(missing, 0.0)
                self._progress_bytes(missing)
                self.level = Q
                self._set_scale()
                changed = True
            elif drain > admit and 0.0 < self.level <= (drain - admit) * res:
                self._book(0.0, self.level)        # drained now
                self.level = 0.0
                if self.relax is not None:
                    self.capacity = self.ceiling
                    self._set_scale()
                changed = True
            _, drain = self._rates()
            drained = self._drn + self._drn_lo
            # nothing outstanding: every byte admitted so far has drained, whatever the sums' last bits say
            while waiting and (self.level == 0.0 or waiting[0][0] - drained <= max(drain, R) * res):
                released.append(heapq.heappop(waiting)[2])
                changed = True
        if not was_idle and self.idle:
            self.idle_since = now
        if self.level > self.peak:
            self.peak = self.level
        if self.log is not None:
            t, lvl, adm, drn = self.log
            if t and t[-1] == now:
                lvl[-1], adm[-1], drn[-1] = self.level, self.admitted, self.drained
            else:
                t.append(now)
                lvl.append(self.level)
                adm.append(self.admitted)
                drn.append(self.drained)
        return released, self._horizon()

    def _horizon(self) -> float:
        admit, drain = self._rates()
        horizon = math.inf
        if self._active:
            horizon = self._next_finish()
        if admit > drain and self.level < self.capacity:
            horizon = min(horizon, (self.capacity - self.level) / (admit - drain))
        elif drain > admit and self.level > 0.0:
            horizon = min(horizon, self.level / (drain - admit))
        if self._waiting and drain > 0.0:
            horizon = min(horizon, max(self._waiting[0][0] - self._drn - self._drn_lo, 0.0) / drain)
        if self.relax is not None and self._scale < 1.0 and self.level >= self.capacity > self.floor:
            if self.exponential:                  # the room reaches the demand; a finish before that, exactly
                horizon = min(horizon, self._release_in())
                if self._active:                  # (the linear _next_finish above is a later bound: the room grows)
                    need = (self._active[0][0] - self._vclock) * self._demand   # bytes still to get in
                    horizon = min(horizon, exponential_fill_time_us(need, self.drain_rate, self.capacity - self.floor,
                                                                    self._tau()))
            else:
                horizon = min(horizon, (self.capacity - self.floor) / self.relax)   # the capacity reaches its floor
        return horizon
