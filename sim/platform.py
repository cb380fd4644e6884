"""The X-Stage platform model M_X = (T_iss0(K, B), R, Q(K)), plus SM count and tensor rates.

Units: bytes, microseconds, GB/s (1 GB/s = 1e3 bytes/us).

T_iss0(K, B), the backpressure-free issue time of a burst in which K producers each store B
bytes, is modelled as

    T_iss0(K, B) = t_fixed_us + max(B / producer_issue_GBps, K * B / injection_GBps)

- a fixed per-burst cost (loop prologue, address generation, timer reads, the first store's
  latency to acceptance),
- a per-producer issue throughput: one SM can only accept so many 16-byte stores per cycle, so a
  producer's issue time grows linearly with B and does not depend on K while the SMs are
  independent,
- an optional aggregate injection ceiling (the SMs share the path towards the fabric / PCIe
  front end): once K * B / T exceeds it, T_iss0 grows with K as well. ``None`` = no ceiling seen.

Q(K), the effective outstanding capacity, is piecewise linear in K through the calibrated points,
proportional to K below the first point (each SM brings its own outstanding-request slots) and flat
beyond the last one.

Schema version 2 adds, optionally, a two-stage X-Stage: a per-SM store stage in front of the shared
buffer and the drain (both fields ``None``: the one-stage X-Stage of version 1, and a version-1 file):

- ``sm_store_GBps`` (r_sm): a producer's stores leave its SM at most at r_sm, and the sender sees its
  issue end when the last byte has left the SM. The stage holds nothing of its own, so it is a cap on
  the producer's injection rate: T_iss0(K, B) = max(t_fixed + max(B/P, K B/I), B / r_sm).
- ``sm_outstanding_bytes`` (q_sm): every SM may keep q_sm bytes outstanding beyond its exit in front of
  the shared buffer, whose capacity is then ``capacity_points`` (give ``[[1, Q]]`` for one that does not
  grow with K): Q(K) = Q_shared(K) + K q_sm. For K symmetric producers (the burst experiments) this is
  exact: a producer stalls only once its own slots and the shared buffer are full, and both drain at R.
  The replay uses the same Q(K) at the programs' K (docs/model.md, "Two-stage X-Stage").
- ``start_skew_us`` (s): the K producers of a burst do not start at one instant (a lockstep burst leaves a
  grid barrier over a window; K starts spread uniformly over s have an expected range of s (K - 1) / (K + 1)),
  so the aggregate issue time, first store of the first producer to the last acceptance of the last, gains
  that range: T_iss0(K, B) = t_fixed + max(B/P, K B/I) + s (K - 1) / (K + 1). One producer (K = 1) has
  none; a kernel's own tile spans compare with t_fixed + B/P (docs/model.md, "What issue time means").
- ``store_buffer_bytes`` (b0): an SM accepts its first b0 bytes of a burst at once (a store buffer in front
  of its issue path) and the rest at P: the per-producer term is max(B - b0, 0) / P. The H200 host path's
  issue is convex in B (about 77 GB/s per SM below 16 KiB, 51 GB/s above: the probe's first bursts and the
  lockstep plateaus alike); one slope cannot follow both.
- ``free_t_fixed_us`` (t_free): free-running bursts (no barrier between bursts; each producer's own span)
  have no start skew and their own fixed part: T_iss0,free(K, B) = t_free + max(max(B - b0, 0)/P, K B/I)
  (``free_issue_time0_us``; None: the lockstep law). Local HBM's free bursts take 0.155 us at 2 KiB at
  every K from 4 to 132, where the lockstep law gives 0.29-0.46 us (docs/calibration.md).
- ``free_capacity_bound`` (false: session 8, cal6): whether free-running bursts see the lockstep capacity Q(K).
  False: a free-running burst of volume V sees a capacity of (at least) its own volume, so Eq. 3 alone holds,
  T_iss = max(T_iss0,free, V/R - G), with no (V - Q)/R term and no relaxing capacity (``free_running(V)``).
  H200 host path: a free burst of 28.9 MiB issues in 4.5 us once G >= V/R, where the lockstep Q(132) is ~3 MiB
  (docs/calibration/free-running.md). None (or true): the lockstep capacity, as before.
- ``skew_overlaps_ceiling`` (session 8, cal7; ``--model two-stage-gated2``): true: the start skew sits inside the
  per-producer branch, T_iss0 = t_fixed + max(max(B - b0, 0)/P + s (K - 1)/(K + 1), K B/I) -- while the last
  producers start, the early ones already fill the aggregate path (docs/calibration/issue-law.md). None: additive.
- ``free_producer_issue_GBps``, ``free_store_buffer_bytes``, ``free_injection_GBps``, ``free_drain_rate_GBps``
  (session 9, cal9): a free-running burst's own P, b0, aggregate ceiling I (false: none) and drain rate R
  (``free_running``; each None: the lockstep field). Local HBM's free bursts issue at one producer's rate at every K up to 8 TB/s
  aggregate (no ceiling near the lockstep I = 5.1 TB/s) and drain at ~4.5 TB/s where the lockstep runs, whose
  barrier hides the drain, bound R only from below at 3.5 TB/s (docs/calibration/free-local.md).
- ``capacity_relax_exponential`` (session 9, cal8; ``--model two-stage-gated3``): true: the relaxing capacity
  below falls exponentially toward its floor instead of linearly, dC/dt = -rho (C - Q_shared) / (Q(K) - Q_shared)
  while held back -- rho is its initial rate, (Q(K) - Q_shared) / rho its time constant; the floor is approached,
  never reached (docs/calibration/knee.md). None: linear, as before. Needs ``capacity_relax_GBps``.
- ``capacity_floor_bytes`` (session 10, knee11; ``--model two-stage-knee2``): the floor Q_f the relaxing
  capacity falls to, one figure for every K (capped at Q(K)); None: Q_shared(K). With it, ``capacity_relax_GBps``
  needs no ``sm_outstanding_bytes``: Q(K) may be the per-K ``capacity_points`` (docs/calibration/knee11.md).
- ``lockstep_drain_gated`` (session 10, knee11; ``--model two-stage-knee``, ``two-stage-knee2``): true: a
  lockstep burst (every burst starts from a drained path) waits for the drain only once it fills the X-Stage,
  V - R T_iss0 > Q(K); below that its issue time is T_iss0, without Eq. 3's V/R - G term (as the simulator's
  lockstep mode has it). None: the model check's lockstep form as before.
- ``lockstep_catch_band`` and ``lockstep_barrier_us`` (session 11, knee12; ``--model two-stage-state``; need
  ``lockstep_drain_gated``): a lockstep burst's state carried burst to burst. w (0 <= w < 1): below the knee, a
  burst with V - R T_iss0 > (1 - w) Q(K) is caught now and then (the knee's run-to-run onset); a caught burst
  relaxes the capacity, which recovers only once the path has emptied, so where the path does not empty between
  bursts -- the spin gap plus the barrier b (us) plus T_iss0 ends before the drain, G + b + T_iss0 < V/R -- one
  catch holds every later burst caught, and the steady half of the run is caught (the gated2 form, V/R - G);
  elsewhere it issues at T_iss0 (the gate). The model check reads them; the fluid queues do not
  (docs/calibration/knee12.md).
- ``lockstep_knee_ratio_points`` (session 12, knee13; ``--model two-stage-kneek``; needs ``lockstep_drain_gated``,
  not with ``lockstep_catch_band``): ((K, r), ...), the knee11 gate placed per K. A lockstep burst waits for the
  drain (gated2's form, max(T_iss0, V/R - G, relaxing Eq. 7)) only once V - R T_iss0 > r(K) Q(K); below that it
  issues at T_iss0. r(K) is linear in K between the points and flat outside them (``knee_ratio_at``); r = 1 at
  every K is knee11's gate. The fit reads r at each calibrated K from that K's own lockstep points (where its
  pairs switch from free to caught). Only the model check reads it; the fluid queues do not
  (docs/calibration/knee13.md).
  All of these but ``sm_store_GBps``, ``sm_outstanding_bytes`` and ``capacity_relax_GBps`` are written only when
  set, so version-2 files without them keep their contents and hash.
- ``start_skew_points`` (session 11, skew12; ``xstage sim bursts --start-skew-us``): ((K, us), ...), a measured
  start skew (the last producer's start after the first, the lockstep barrier's release as the producers see it)
  in place of the law's s (K - 1)/(K + 1): linear in K between the points, flat outside them. A platform input
  measured per session, not fitted (docs/calibration/finite-skew.md). None: the law. Written only when set.
- ``capacity_relax_GBps`` (rho, needs ``sm_outstanding_bytes``): a relaxing capacity. While the X-Stage
  is full and holds the producers back, the per-SM slots are given up at rho: the capacity falls from
  Q(K) towards the shared buffer's Q_shared(K) (the producers get R - rho in meanwhile), and it is back at
  Q(K) once the X-Stage empties. What the H200 host path shows (docs/calibration.md): bursts from an empty
  path run at full speed up to ~Q_shared + K q_sm outstanding, long backpressured bursts keep only
  ~Q_shared ahead of the drain.

No field of version 2 changes the fluid queue's equations, so every closed form, engine and fit that
reads ``issue_time0_us``, ``producer_rate_Bpus`` and ``capacity_bytes`` reads the two-stage platform too.
A platform without them is written as version 1, byte for byte as before (same content hash).
Writing a platform file is ``xstage.records.platform.save_platform``'s job; this module is pure.
"""

import json
import numbers
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from xstage.errors import InputError, require_int, require_positive
from xstage.provenance import content_hash
from xstage.sim import model_two_stage

PLATFORM_SCHEMA_VERSION = 2          # the newest version this module reads and writes
SCHEMA_VERSIONS = (1, 2)
TWO_STAGE_FIELDS = ("sm_store_GBps", "sm_outstanding_bytes", "capacity_relax_GBps", "start_skew_us",
                    "store_buffer_bytes", "free_t_fixed_us", "free_capacity_bound",
                    "skew_overlaps_ceiling") + ("free_producer_issue_GBps", "free_store_buffer_bytes",
                                                "free_injection_GBps", "free_drain_rate_GBps",
                                                "capacity_relax_exponential") + (
                        "capacity_floor_bytes", "lockstep_drain_gated") + (
                        "lockstep_catch_band", "lockstep_barrier_us")   # version 2 only
_FREE_OVERRIDES = (("free_producer_issue_GBps", "producer_issue_GBps"), ("free_store_buffer_bytes", "store_buffer_bytes"),
                   ("free_injection_GBps", "injection_GBps"), ("free_drain_rate_GBps", "drain_rate_GBps"))
_WRITTEN_WHEN_SET = ("start_skew_us", "store_buffer_bytes", "free_t_fixed_us", "free_capacity_bound",
                     "skew_overlaps_ceiling") + tuple(f for f, _ in _FREE_OVERRIDES) + (
                     "capacity_relax_exponential", "capacity_floor_bytes", "lockstep_drain_gated",
                     "lockstep_catch_band", "lockstep_barrier_us")
# version-2 fields added later: left out of the file while None
TWO_STAGE_FIELDS += ("start_skew_points",)          # skew12: a measured start skew per K (written only when set)
_WRITTEN_WHEN_SET += ("start_skew_points",)
TWO_STAGE_FIELDS += ("lockstep_knee_ratio_points",)   # knee13: the lockstep gate's knee per K (written only when set)
_WRITTEN_WHEN_SET += ("lockstep_knee_ratio_points",)
_BUNDLED_PACKAGE = "xstage.sim"


@dataclass(frozen=True)
class Platform:
    name: str
    sm_count: int
    drain_rate_GBps: float
    t_fixed_us: float
    producer_issue_GBps: float
    capacity_points: tuple  # ((K, bytes), ...) sorted by K
    injection_GBps: float | None = None
    target: str = "peer"
    tensor_TFLOPs: dict = field(default_factory=dict)  # whole-GPU dense rate by precision
    description: str = ""
    notes: dict = field(default_factory=dict)  # free text: sources, assumptions, fit residuals, provenance
    sm_store_GBps: float | None = None          # v2: r_sm, per-SM store stage rate (None: no such stage)
    sm_outstanding_bytes: float | None = None   # v2: q_sm, per-SM outstanding limit before the shared buffer
    capacity_relax_GBps: float | None = None    # v2: rho, rate at which a full X-Stage gives up the per-SM slots
    start_skew_us: float | None = None          # v2: s, the K producers' starts spread: + s (K - 1) / (K + 1)
    store_buffer_bytes: float | None = None     # v2: b0, bytes an SM accepts at once: B / P -> max(B - b0, 0) / P
    free_t_fixed_us: float | None = None        # v2: fixed part of a free-running burst's issue span (no skew)
    free_capacity_bound: bool | None = None     # v2: False: free-running bursts see no capacity below their volume
    skew_overlaps_ceiling: bool | None = None   # v2: True: t_fixed + max(max(B - b0, 0)/P + s (K-1)/(K+1), K B/I)
    free_producer_issue_GBps: float | None = None   # v2: P of free-running bursts (None: producer_issue_GBps)
    free_store_buffer_bytes: float | None = None    # v2: b0 of free-running bursts (None: store_buffer_bytes)
    free_injection_GBps: float | bool | None = None  # v2: I of free-running bursts (false: none; None: injection_GBps)
    free_drain_rate_GBps: float | None = None       # v2: R seen by free-running bursts (None: drain_rate_GBps)
    capacity_relax_exponential: bool | None = None   # v2: True: the relaxing capacity falls exponentially to its floor
    capacity_floor_bytes: float | None = None   # v2: the relaxing capacity's floor Q_f (None: Q_shared(K)), K-free
    lockstep_drain_gated: bool | None = None    # v2: True: a lockstep burst waits for the drain only once it fills Q(K)
    lockstep_catch_band: float | None = None    # v2: w: below the knee by < w Q(K), caught where the path never empties
    lockstep_barrier_us: float | None = None    # v2: b: the lockstep barrier's own time after the spin gap (us)
    start_skew_points: tuple | None = None      # v2: ((K, us), ...) measured start skew, in place of s (K-1)/(K+1)
    lockstep_knee_ratio_points: tuple | None = None  # v2: ((K, r), ...) the lockstep gate at V - R T_iss0 > r(K) Q(K)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise InputError("platform.name", self.name, "must be a non-empty string")
        if isinstance(self.sm_count, bool) or not isinstance(self.sm_count, numbers.Integral):
            raise InputError("platform.sm_count", self.sm_count, "must be an integer")
        object.__setattr__(self, "sm_count", require_int("platform.sm_count", self.sm_count))
        _real("platform.drain_rate_GBps", self.drain_rate_GBps)
        _real("platform.t_fixed_us", self.t_fixed_us, allow_zero=True)
        _real("platform.producer_issue_GBps", self.producer_issue_GBps)
        if self.injection_GBps is not None:
            _real("platform.injection_GBps", self.injection_GBps)
        object.__setattr__(self, "capacity_points",
                           _k_points("platform.capacity_points", self.capacity_points, "bytes"))
        if not isinstance(self.target, str) or not self.target:
            raise InputError("platform.target", self.target, "must be a non-empty string")
        if not isinstance(self.tensor_TFLOPs, dict):
            raise InputError("platform.tensor_TFLOPs", self.tensor_TFLOPs,
                             "must be an object of precision: TFLOP/s (or {})")
        for prec, rate in self.tensor_TFLOPs.items():
            _real(f"platform.tensor_TFLOPs[{prec}]", rate)
        if not isinstance(self.description, str):
            raise InputError("platform.description", self.description, "must be a string")
        if not isinstance(self.notes, dict):
            raise InputError("platform.notes", self.notes, "must be an object (or {})")
        if self.sm_store_GBps is not None:
            object.__setattr__(self, "sm_store_GBps", _real("platform.sm_store_GBps", self.sm_store_GBps))
        if self.sm_outstanding_bytes is not None:
            object.__setattr__(self, "sm_outstanding_bytes",
                               _real("platform.sm_outstanding_bytes", self.sm_outstanding_bytes, allow_zero=True))
        if self.capacity_relax_GBps is not None:
            rho = _real("platform.capacity_relax_GBps", self.capacity_relax_GBps)
            if rho >= self.drain_rate_GBps:
                raise InputError("platform.capacity_relax_GBps", self.capacity_relax_GBps,
                                 f"must be below drain_rate_GBps={self.drain_rate_GBps}")
            if not self.sm_outstanding_bytes and self.capacity_floor_bytes is None:
                raise InputError("platform.capacity_relax_GBps", self.capacity_relax_GBps,
                                 "needs sm_outstanding_bytes > 0 (the slots it gives up) or capacity_floor_bytes")
            object.__setattr__(self, "capacity_relax_GBps", rho)
        if self.store_buffer_bytes is not None:
            object.__setattr__(self, "store_buffer_bytes", _real("platform.store_buffer_bytes", self.store_buffer_bytes,
                                                                 allow_zero=True))
        if self.start_skew_us is not None:
            object.__setattr__(self, "start_skew_us", _real("platform.start_skew_us", self.start_skew_us,
                                                            allow_zero=True))
        if self.free_t_fixed_us is not None:
            object.__setattr__(self, "free_t_fixed_us", _real("platform.free_t_fixed_us", self.free_t_fixed_us,
                                                              allow_zero=True))
        if self.free_capacity_bound is not None and not isinstance(self.free_capacity_bound, bool):
            raise InputError("platform.free_capacity_bound", self.free_capacity_bound, "must be true or false")
        if self.skew_overlaps_ceiling is not None and not isinstance(self.skew_overlaps_ceiling, bool):
            raise InputError("platform.skew_overlaps_ceiling", self.skew_overlaps_ceiling, "must be true or false")
        for name, _ in _FREE_OVERRIDES:
            value = getattr(self, name)
            if value is None or (value is False and name == "free_injection_GBps"):   # false: no ceiling
                continue
            if name == "free_injection_GBps" and value is True:
                raise InputError("platform.free_injection_GBps", value, "must be a number or false (no ceiling)")
            object.__setattr__(self, name, _real(f"platform.{name}", value, allow_zero=name == "free_store_buffer_bytes"))
        if (self.free_drain_rate_GBps is not None and self.capacity_relax_GBps is not None
                and self.free_drain_rate_GBps <= self.capacity_relax_GBps):
            raise InputError("platform.free_drain_rate_GBps", self.free_drain_rate_GBps,
                             f"must be above capacity_relax_GBps={self.capacity_relax_GBps}")
        if self.capacity_relax_exponential is not None:
            if not isinstance(self.capacity_relax_exponential, bool):
                raise InputError("platform.capacity_relax_exponential", self.capacity_relax_exponential,
                                 "must be true or false")
            if self.capacity_relax_GBps is None:
                raise InputError("platform.capacity_relax_exponential", self.capacity_relax_exponential,
                                 "needs capacity_relax_GBps (the relaxing capacity it shapes)")
        if self.capacity_floor_bytes is not None:
            object.__setattr__(self, "capacity_floor_bytes", _real("platform.capacity_floor_bytes",
                                                                   self.capacity_floor_bytes))   # > 0: the queue needs it
            if self.capacity_relax_GBps is None:
                raise InputError("platform.capacity_floor_bytes", self.capacity_floor_bytes,
                                 "needs capacity_relax_GBps (the relaxing capacity it bounds)")
        if self.lockstep_drain_gated is not None and not isinstance(self.lockstep_drain_gated, bool):
            raise InputError("platform.lockstep_drain_gated", self.lockstep_drain_gated, "must be true or false")
        if self.start_skew_points is not None:
            object.__setattr__(self, "start_skew_points",
                               _k_points("platform.start_skew_points", self.start_skew_points, "us", allow_zero=True))
        if (self.lockstep_catch_band is None) != (self.lockstep_barrier_us is None):
            name = "lockstep_catch_band" if self.lockstep_barrier_us is None else "lockstep_barrier_us"
            raise InputError(f"platform.{name}", getattr(self, name),
                             "needs lockstep_catch_band and lockstep_barrier_us together")
        if self.lockstep_catch_band is not None:
            w = self.lockstep_catch_band
            if isinstance(w, bool) or not isinstance(w, numbers.Real) or not 0.0 <= w < 1.0:
                raise InputError("platform.lockstep_catch_band", w, "must be a number in [0, 1)")
            object.__setattr__(self, "lockstep_catch_band", float(w))
            object.__setattr__(self, "lockstep_barrier_us", _real("platform.lockstep_barrier_us",
                                                                  self.lockstep_barrier_us, allow_zero=True))
            if self.lockstep_drain_gated is not True:
                raise InputError("platform.lockstep_catch_band", w,
                                 "needs lockstep_drain_gated true (the gate it widens)")
        if self.lockstep_knee_ratio_points is not None:          # knee13
            object.__setattr__(self, "lockstep_knee_ratio_points", _k_points(
                "platform.lockstep_knee_ratio_points", self.lockstep_knee_ratio_points, "ratio"))
            if self.lockstep_drain_gated is not True:
                raise InputError("platform.lockstep_knee_ratio_points", self.lockstep_knee_ratio_points,
                                 "needs lockstep_drain_gated true (the gate it places)")
            if self.lockstep_catch_band is not None:
                raise InputError("platform.lockstep_knee_ratio_points", self.lockstep_knee_ratio_points,
                                 "cannot go with lockstep_catch_band (one knee law at a time)")

    @property
    def schema_version(self) -> int:
        """1 for the one-stage X-Stage, 2 when a per-SM stage field is set."""
        return 2 if self.two_stage else 1

    @property
    def two_stage(self) -> bool:
        return any(getattr(self, name) is not None for name in TWO_STAGE_FIELDS)

    @property
    def relaxing(self) -> bool:
        return self.capacity_relax_GBps is not None

    def queue_options(self, producers: int) -> dict:
        """Keyword arguments of ``FluidQueue`` / ``FluidXStage`` beyond (R, Q(K)): the relaxing capacity (and
        ``relax_exponential`` only where ``capacity_relax_exponential`` is set)."""
        if not self.relaxing:
            return {}
        floor = (self.shared_capacity_bytes(producers) if self.capacity_floor_bytes is None   # knee11: a K-free floor,
                 else min(self.capacity_floor_bytes, self.capacity_bytes(producers)))   # never above Q(K)
        opts = {"relax_Bpus": self.capacity_relax_GBps * 1e3, "floor_bytes": floor}
        if self.capacity_relax_exponential:
            opts["relax_exponential"] = True
        return opts

    # --- the three parameters -------------------------------------------------------------
    @property
    def drain_rate_Bpus(self) -> float:
        """R in bytes per microsecond."""
        return self.drain_rate_GBps * 1e3

    def issue_time0_us(self, producers: int, bytes_per_producer: float) -> float:
        """T_iss0(K, B): backpressure-free issue time of a burst (us)."""
        per_producer = max(bytes_per_producer - (self.store_buffer_bytes or 0.0), 0.0) / (self.producer_issue_GBps * 1e3)
        aggregate = 0.0
        if self.injection_GBps is not None:
            aggregate = producers * bytes_per_producer / (self.injection_GBps * 1e3)
        skew = 0.0 if self.start_skew_us is None else self.start_skew_us * (producers - 1) / (producers + 1)
        if self.start_skew_points is not None:     # skew12: the session's measured start skew at K
            skew = start_skew_at(self.start_skew_points, producers)
        if self.skew_overlaps_ceiling:             # the skew overlaps the aggregate ceiling (two-stage-gated2)
            t0 = self.t_fixed_us + max(per_producer + skew, aggregate)
        else:
            t0 = self.t_fixed_us + max(per_producer, aggregate) + skew
        if self.sm_store_GBps is None:
            return t0
        return model_two_stage.sm_stage_issue_time0_us(t0, bytes_per_producer, self.sm_store_GBps * 1e3)

    def free_running(self, volume_bytes: float | None = None) -> "Platform":
        """The platform a free-running burst (no barrier between bursts) sees: with ``free_t_fixed_us`` set,
        t_fixed = t_free and no start skew (free-running producers do not start together; each one's issue
        span is its own); the ``free_*`` P, b0, I and R in place of the lockstep ones where set; with
        ``free_capacity_bound`` false and the burst's volume V given, a flat capacity of V
        and no per-SM slots or relaxing (Eq. 3 alone: T_iss = max(T_iss0,free, V/R - G)); else the platform
        itself. The simulator's free mode and the model check read it."""
        from dataclasses import replace
        plat = self
        if self.free_t_fixed_us is not None:
            plat = replace(plat, t_fixed_us=self.free_t_fixed_us,
                           start_skew_us=None if self.start_skew_us is None else 0.0, start_skew_points=None)
        own = {lockstep: getattr(self, name) for name, lockstep in _FREE_OVERRIDES if getattr(self, name) is not None}
        if own.get("injection_GBps") is False:      # free_injection_GBps false: free bursts see no aggregate ceiling
            own["injection_GBps"] = None
        if own:
            plat = replace(plat, **own)
        if self.free_capacity_bound is False and volume_bytes is not None:
            plat = replace(plat, capacity_points=((1, max(float(volume_bytes), 1.0)),), sm_outstanding_bytes=None,
                           capacity_relax_GBps=None, capacity_relax_exponential=None, capacity_floor_bytes=None)
        return plat

    def free_issue_time0_us(self, producers: int, bytes_per_producer: float) -> float:
        """T_iss0 of a free-running burst: t_free + max(max(B - b0, 0) / P, K B / I) behind the SM stage
        (``free_running``); ``issue_time0_us`` when ``free_t_fixed_us`` is None."""
        return self.free_running().issue_time0_us(producers, bytes_per_producer)

    def producer_rate_Bpus(self, producers: int, bytes_per_producer: float) -> float:
        """Backpressure-free injection rate of one producer: B / T_iss0(K, B) (bytes/us)."""
        return bytes_per_producer / self.issue_time0_us(producers, bytes_per_producer)

    def capacity_bytes(self, producers: int) -> float:
        """Q(K): effective outstanding capacity for K producers (bytes): the shared buffer's Q(K), plus
        K q_sm with a per-SM outstanding limit (version 2)."""
        q = self.shared_capacity_bytes(producers)
        if self.sm_outstanding_bytes is None:
            return q
        return model_two_stage.two_stage_capacity_bytes(q, producers, self.sm_outstanding_bytes)

    def lockstep_knee_bytes(self, producers: int) -> float:
        """The excess V - R T_iss0 above which a gated lockstep burst waits for the drain (bytes): r(K) Q(K) with
        ``lockstep_knee_ratio_points`` (knee13), Q(K) otherwise."""
        q = self.capacity_bytes(producers)
        if self.lockstep_knee_ratio_points is None:
            return q
        return knee_ratio_at(self.lockstep_knee_ratio_points, producers) * q

    def shared_capacity_bytes(self, producers: int) -> float:
        """The shared buffer's capacity for K producers, from ``capacity_points`` (bytes)."""
        pts = self.capacity_points
        k0, q0 = pts[0]
        if producers <= k0:
            return q0 * producers / k0
        for (ka, qa), (kb, qb) in zip(pts, pts[1:]):
            if producers <= kb:
                return qa + (qb - qa) * (producers - ka) / (kb - ka)
        return pts[-1][1]

    def tensor_rate_per_sm_TFLOPs(self, precision: str) -> float:
        if precision not in self.tensor_TFLOPs:
            raise InputError("precision", precision, f"has no tensor rate on platform {self.name!r} "
                             f"(known: {sorted(self.tensor_TFLOPs)})")
        return self.tensor_TFLOPs[precision] / self.sm_count

    def check_producers(self, producers: int) -> int:
        producers = require_int("producers", producers)
        if producers > self.sm_count:
            raise InputError("producers", producers, f"must be <= the platform's {self.sm_count} SMs")
        return producers

    # --- files ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The file's contents: version 1 (exactly as before) unless a two-stage field is set."""
        d = asdict(self)
        d["capacity_points"] = [list(p) for p in self.capacity_points]
        if self.start_skew_points is not None:
            d["start_skew_points"] = [list(p) for p in self.start_skew_points]
        if self.lockstep_knee_ratio_points is not None:
            d["lockstep_knee_ratio_points"] = [list(p) for p in self.lockstep_knee_ratio_points]
        for name in TWO_STAGE_FIELDS:
            if not self.two_stage or (name in _WRITTEN_WHEN_SET and d[name] is None):
                del d[name]
        return {"schema_version": self.schema_version, **d}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @property
    def content_hash(self) -> str:
        return content_hash(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict, source: str = "platform") -> "Platform":
        if not isinstance(d, dict):
            raise InputError(source, type(d).__name__, "must hold a JSON object")
        version = d.get("schema_version")
        if isinstance(version, bool) or version not in SCHEMA_VERSIONS:
            raise InputError(f"{source} schema_version", version,
                             f"must be one of {', '.join(map(str, SCHEMA_VERSIONS))}")
        fields = {k: v for k, v in d.items() if k != "schema_version"}
        known = set(cls.__dataclass_fields__) - (set(TWO_STAGE_FIELDS) if version == 1 else set())
        unknown = sorted(set(fields) - known)
        if unknown:
            raise InputError(f"{source} fields", unknown, "are not platform fields")
        missing = sorted(k for k in ("name", "sm_count", "drain_rate_GBps", "t_fixed_us", "producer_issue_GBps",
                                     "capacity_points") if k not in fields)
        if missing:
            raise InputError(f"{source} fields", missing, "are missing")
        return cls(**fields)

    @classmethod
    def load(cls, path) -> "Platform":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError("platform", str(path), "does not exist") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise InputError("platform", str(path), f"is not valid JSON ({err.__class__.__name__})") from None
        return cls.from_dict(data, source=f"platform file {path.name}")


def _real(field: str, value, *, allow_zero: bool = False) -> float:
    """A platform number: a JSON number (not a string, not a boolean), finite, > 0 (>= 0 with allow_zero)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(field, value, "must be a number")
    return float(require_positive(field, value, allow_zero=allow_zero))


def _k_points(field: str, points, unit: str, *, allow_zero: bool = False) -> tuple:
    """((K, value), ...) sorted by K: K an integer >= 1, the value a number > 0 (>= 0 with allow_zero), no K twice;
    ``unit`` names the value in the messages ([producers, <unit>] pairs)."""
    if not isinstance(points, (list, tuple)) or not points:
        raise InputError(field, points, f"must be a non-empty list of [producers, {unit}] pairs")
    out = []
    for pair in points:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise InputError(field, points, f"must be a list of [producers, {unit}] pairs")
        k, v = pair
        if isinstance(k, bool) or not isinstance(k, numbers.Real) or not float(k).is_integer():
            raise InputError(f"{field} producers", k, "must be an integer")
        out.append((require_int(f"{field} producers", int(k)), _real(f"{field} {unit}", v, allow_zero=allow_zero)))
    out.sort()
    if len({k for k, _ in out}) != len(out):
        raise InputError(field, points, "must not give one producer count twice")
    return tuple(out)


def _linear_in_k(points, producers: int) -> float:
    """The value of ``points`` ((K, value), ... sorted by K) at K producers: linear in K between the points, flat
    outside them."""
    if producers <= points[0][0]:
        return points[0][1]
    for (ka, va), (kb, vb) in zip(points, points[1:]):
        if producers <= kb:
            return va + (vb - va) * (producers - ka) / (kb - ka)
    return points[-1][1]


def start_skew_at(points, producers: int) -> float:
    """The measured start skew at K producers (us): linear in K between the points, flat outside them;
    K = 1 has none."""
    return 0.0 if producers <= 1 else _linear_in_k(points, producers)


def knee_ratio_at(points, producers: int) -> float:
    """The lockstep knee ratio r(K) (knee13): linear in K between the points, flat outside them."""
    return _linear_in_k(points, producers)


def bundled_platforms() -> list[str]:
    folder = resources.files(_BUNDLED_PACKAGE) / "platforms"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def load_platform(name_or_path) -> Platform:
    """A bundled platform by name (``paper-b200``) or a platform JSON file by path."""
    text = str(name_or_path)
    if text.endswith(".json") or "/" in text or Path(text).is_file():
        return Platform.load(text)
    if text not in bundled_platforms():
        raise InputError("platform", text, f"is unknown (bundled: {', '.join(bundled_platforms())}; "
                         "or give a platform .json file)")
    blob = (resources.files(_BUNDLED_PACKAGE) / "platforms" / f"{text}.json").read_text()
    return Platform.from_dict(json.loads(blob), source=f"bundled platform {text}")

