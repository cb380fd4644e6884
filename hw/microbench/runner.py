"""Remote-store microbenchmark (the X-Stage paper, Sec. 3.1) on a real GPU.

Run the self-test (timer tick, pattern checks, a corrupted-word check) on a GPU machine:

    python -m xstage.hw.microbench.runner --selftest [--target host|local] [--small]
    torchrun --standalone --nproc-per-node=8 -m xstage.hw.microbench.runner --selftest --target peer --peer-pattern all

The kernel (``microbench.cu``, CuPy RawModule, NVRTC) runs K producer CTAs, one per SM (each CTA
asks for more than half the SM's shared memory). Every burst a producer writes B bytes with 16-byte
stores, then runs a producer-side gap G: a spin on %globaltimer (``spin``), a spin on clock64
(``clock``) or a loop of FMAs (``fma``: useful work; G is then whatever the loop takes, measured).

Modes
    periodic   lockstep: a grid barrier starts every burst, so the K producers inject the aggregate
               burst V = K * B together, then each runs its gap. The barrier's thread 0 runs a
               GPU-scope __threadfence() before arriving; on the H200 host path that made every
               lockstep burst wait for the previous one to drain (the wait shows up in the gap).
    aligned    the same per-burst barrier without any fence (atomics only): aligned bursts whose
               predecessors may still be draining (not yet run on a GPU).
    free       producers repeat burst + gap independently after one common start barrier. On the
               host path the first H200 runs showed that free-running producers drift apart (unfair
               arbitration: some SMs issue at full speed while others stall for tens of us), so
               their bursts stop overlapping; aggregate figures then come from a time window.
    isolated   after each burst every thread runs __threadfence_system (its stores are performed
               system-wide), then all CTAs meet at a grid barrier, then wait ``settle_us``: the next
               burst starts with the remote path drained. On the host path "performed" means the
               posted PCIe writes have left the GPU's tracking, not that they sit in DRAM; the
               settle time (default 10 us on host, >> the few KiB of PCIe/root-complex buffering
               at ~50 GB/s) covers the rest.

Peer patterns (target ``peer``, see ``targets.PeerLayout``): ``next`` stores every producer's bursts
into the next rank's buffer (``burst_kernel``); ``all`` (all-to-all) gives each producer its own
destination, p -> rank (r + 1 + p mod (W-1)) mod W, through a device table of the peers' base
addresses (``burst_kernel_multi``). Each sender owns one disjoint region of every peer's buffer and
checks it after every trial through its peer mapping (``verify_rows``); words carry rank << 16 | p,
so a store in another sender's region is caught too. Under ``all`` the ranks meet at a
torch.distributed barrier before every trial, so all of them inject at once.

Addresses: burst b writes copy b % slots of the K slices, with enough copies that a slot is rewritten
only after ``ring_bytes`` (256 MiB) of other stores. Re-writing a few slots in a tight loop lets
the GPU merge repeated writes to the same lines before they leave (the first H200 run showed
host-path "drain rates" up to 186 GB/s, 3x PCIe, with 4 slots); fresh addresses are what a fused
kernel's epilogue produces.

Per burst the device records %globaltimer and clock64 at the burst start and at the sender-visible
issue end (after the CTA's stores are issued and a __syncthreads, no fence: accepted, not
completed). Durations use %globaltimer when its tick is <= 64 ns, else clock64 scaled by the SM
clock measured over the same run (``timebase``). Each run: warm-up trials (discarded), then
``trials`` trials; after every trial the error flag, the one-CTA-per-SM placement and the whole
target buffer's pattern are checked, and any failure raises `MicrobenchError`.
"""

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass
from importlib import resources

import numpy as np
import pandas as pd

from xstage.errors import InputError, require_int, require_positive

MODES = ("free", "isolated", "periodic", "aligned")   # index = the kernel's mode argument
GAP_KINDS = ("spin", "clock", "fma")
NREC = 6                      # u64 per burst, see microbench.cu
COARSE_TICK_NS = 64.0         # above this the durations use clock64
ERRORS = {1: "grid barrier timed out (CTAs not co-resident?)", 2: "a spin loop hit its iteration bound"}
_PATTERN_SEED = (0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F)


class MicrobenchError(RuntimeError):
    """The kernel reported an error, or the target buffer does not hold the expected pattern."""


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

    @property
    def volume_bytes(self) -> int:
        return self.producers * self.bytes_per_producer

    @property
    def words_per_producer(self) -> int:
        return self.bytes_per_producer // 16


# --- the pattern (numpy twin of pattern_word in microbench.cu) -----------------------------------

def pattern_words(producer, burst, offset) -> np.ndarray:
    """uint32 [..., 4] words (producer, burst, offset, hash), broadcast over the inputs."""
    p, b, i = (np.asarray(x, dtype=np.uint32) for x in (producer, burst, offset))
    p, b, i = np.broadcast_arrays(p, b, i)
    with np.errstate(over="ignore"):
        h = (np.uint32(_PATTERN_SEED[0]) ^ (p * np.uint32(_PATTERN_SEED[1]))
             ^ (b * np.uint32(_PATTERN_SEED[2])) ^ (i * np.uint32(_PATTERN_SEED[3])))
    return np.stack([p, b, i, h.astype(np.uint32)], axis=-1)


def last_burst_of_slot(slot: int, slots: int, bursts: int) -> int | None:
    """The last burst that wrote ``slot`` (bursts write slot b % slots), None if none did."""
    if slot >= bursts:
        return None
    return slot + ((bursts - 1 - slot) // slots) * slots


def expected_buffer(producers: int, words_per_producer: int, slots: int, bursts: int, tags=None) -> np.ndarray:
    """The uint32 [slots, K, W, 4] contents after a run (zeros where no burst wrote). ``tags``: the
    pattern tag of each of the K rows (default: the row itself; `NO_PRODUCER`: a row nobody writes),
    as in one destination region of the all-to-all peer pattern (`targets.PeerLayout.tags`)."""
    from xstage.hw.common.targets import NO_PRODUCER
    out = np.zeros((slots, producers, words_per_producer, 4), dtype=np.uint32)
    rows = np.arange(producers) if tags is None else np.asarray(tags, dtype=np.uint32)
    written = rows != NO_PRODUCER
    p = rows[written][:, None]
    i = np.arange(words_per_producer)[None, :]
    for s in range(slots):
        b = last_burst_of_slot(s, slots, bursts)
        if b is not None:
            out[s, written] = pattern_words(p, b, i)
    return out


def check_pattern(words: np.ndarray, producers: int, words_per_producer: int, slots: int, bursts: int,
                  tags=None) -> None:
    """Raise MicrobenchError unless ``words`` (uint32, any shape) equals the expected contents."""
    want = expected_buffer(producers, words_per_producer, slots, bursts, tags).reshape(-1, 4)
    got = np.asarray(words, dtype=np.uint32).reshape(-1)[: want.size].reshape(-1, 4)
    if got.shape != want.shape:
        raise MicrobenchError(f"pattern check: buffer holds {got.shape[0]} words, expected {want.shape[0]}")
    bad = np.flatnonzero((got != want).any(axis=1))
    if bad.size:
        g = int(bad[0])
        raise MicrobenchError(f"pattern check failed: {bad.size} of {want.shape[0]} 16-byte words wrong; "
                              f"first at word {g}: got {got[g].tolist()}, want {want[g].tolist()}")


# --- the timer -------------------------------------------------------------------------------------

def tick_from_reads(gt_ns: np.ndarray) -> dict:
    """%globaltimer resolution from consecutive reads in a tight loop: distinct deltas and the tick."""
    d = np.diff(np.asarray(gt_ns, dtype=np.int64))
    pos = d[d > 0]
    if pos.size == 0:
        raise MicrobenchError("%globaltimer did not advance during the probe")
    values, counts = np.unique(pos, return_counts=True)
    order = np.argsort(-counts)[:8]
    return {
        "tick_ns": float(pos.min()),
        "median_step_ns": float(np.median(pos)),
        "zero_delta_fraction": float((d == 0).mean()),
        "resolved": bool((d == 0).mean() > 0.0),  # reads faster than the tick: every step is one tick
        "distinct_deltas_ns": {int(values[k]): int(counts[k]) for k in order},
        "reads": int(len(gt_ns)),
    }


# --- the runner ------------------------------------------------------------------------------------

def kernel_source() -> str:
    return (resources.files("xstage.hw.microbench") / "microbench.cu").read_text()


class Microbench:
    """Compiled kernels plus one target buffer; `run(spec)` returns burst records."""

    def __init__(self, target, *, timeout_ms: float = 2000.0, ring_bytes: int = 256 * 2**20):
        import cupy
        self.cp = cupy
        self.target = target
        self.ring_bytes = int(ring_bytes)
        self.timeout_ns = int(timeout_ms * 1e6)
        self.module = cupy.RawModule(code=kernel_source(), options=("--std=c++17", "-lineinfo"))
        self.k_burst = self.module.get_function("burst_kernel")
        self.k_fill = self.module.get_function("fill_zero")
        self.k_verify = self.module.get_function("verify_pattern")
        self.k_probe = self.module.get_function("timer_probe")
        self._kernels = {}   # fetched on first use: burst_kernel_multi, verify_rows (peer "all"), flip_bits
        dev = cupy.cuda.Device()
        attrs = dev.attributes
        self.sm_count = int(attrs["MultiProcessorCount"])
        per_sm = int(attrs.get("MaxSharedMemoryPerMultiprocessor", 228 * 1024))
        optin = int(attrs.get("MaxSharedMemoryPerBlockOptin", 227 * 1024))
        self.pad_bytes = min(optin - 1024, per_sm // 2 + 4096)  # > half an SM: one CTA per SM
        self.k_burst.max_dynamic_shared_size_bytes = self.pad_bytes
        self.compute_capability = dev.compute_capability
        self.timer = None

    def kernel(self, name: str):
        """A kernel of the module that only some runs need, fetched once."""
        if name not in self._kernels:
            k = self.module.get_function(name)
            if name.startswith("burst_kernel"):
                k.max_dynamic_shared_size_bytes = self.pad_bytes
            self._kernels[name] = k
        return self._kernels[name]

    # ---- timer ----
    def probe_timer(self, reads: int = 4096, span_us: float = 2000.0) -> dict:
        cp = self.cp
        gt = cp.zeros(reads, dtype=cp.uint64)
        ck = cp.zeros(reads, dtype=cp.uint64)
        span = cp.zeros(4, dtype=cp.uint64)
        err = cp.zeros(1, dtype=cp.int32)
        self.k_probe((1,), (32,), (gt, ck, np.uint32(reads), np.uint64(int(span_us * 1e3)), span, err))
        cp.cuda.runtime.deviceSynchronize()
        if int(err.get()[0]):
            raise MicrobenchError(f"timer probe: {ERRORS.get(int(err.get()[0]), 'error')}")
        info = tick_from_reads(gt.get())
        s = span.get().astype(np.int64)
        info["sm_clock_GHz"] = float((s[3] - s[2]) / (s[1] - s[0]))
        info["read_loop_cycles"] = float(np.median(np.diff(ck.get().astype(np.int64))))
        info["timebase"] = "globaltimer" if info["tick_ns"] <= COARSE_TICK_NS else "clock64"
        self.timer = info
        return info

    # ---- one configuration ----
    def slots_for(self, spec: BurstSpec) -> int:
        """Copies of the K slices the bursts rotate through: enough that a slot is rewritten only after
        ``ring_bytes`` of other stores (fresh addresses; no merging of repeated writes in a cache).
        In the all-to-all peer pattern a copy is `rows` slices in each destination's region."""
        lay = self.target.layout(spec.producers)
        if lay is None:
            need, room, where = spec.volume_bytes, self.target.nbytes, "target buffer"
        else:
            need, room = lay.rows * spec.bytes_per_producer, lay.region_bytes(self.target.nbytes)
            where = f"target buffer region (1/{lay.regions} of {self.target.nbytes} bytes)"
        fit = room // need
        if fit < 1:
            raise InputError("bytes_per_producer", spec.bytes_per_producer,
                             f"needs a {need} byte {where} (have {room})")
        want = max(4, -(-self.ring_bytes // spec.volume_bytes))
        return int(min(spec.bursts, want, fit))

    def regions(self, spec: BurstSpec, slots: int) -> list[dict]:
        """The regions a run writes: one (the target buffer, rows = producers) or, in the all-to-all
        peer pattern, this sender's region in every destination (rows and pattern tags per region)."""
        K, W = spec.producers, spec.words_per_producer
        lay = self.target.layout(K)
        if lay is None:
            return [{"dest": None, "ptr": int(self.target.ptr), "rows": K, "tags": None, "words": slots * K * W}]
        return [{"dest": d, "ptr": int(self.target.peer_ptrs[d]) + lay.region_offset(d, self.target.nbytes),
                 "rows": lay.rows, "tags": lay.tags(d), "words": slots * lay.rows * W} for d in lay.dests]

    def _burst_launch(self, spec: BurstSpec, regions: list[dict]):
        """(kernel, leading arguments) of the burst kernel: the buffer, or the destination tables."""
        lay = self.target.layout(spec.producers)
        if lay is None:
            return self.k_burst, (np.uint64(regions[0]["ptr"]),)
        cp = self.cp
        index = {r["dest"]: k for k, r in enumerate(regions)}
        table = cp.zeros(len(regions), dtype=cp.uint64)
        table.set(np.array([r["ptr"] for r in regions], dtype=np.uint64))
        dst_of = cp.zeros(spec.producers, dtype=cp.uint32)
        dst_of.set(np.array([index[int(d)] for d in lay.dest_of], dtype=np.uint32))
        row_of = cp.zeros(spec.producers, dtype=cp.uint32)
        row_of.set(lay.row_of.astype(np.uint32))
        return self.kernel("burst_kernel_multi"), (table, dst_of, row_of, np.uint32(lay.rows), np.uint32(lay.tag_base))

    def verify(self, spec: BurstSpec, slots: int | None = None) -> int:
        """Check every region the last run of ``spec`` wrote, on the device (through the peer mapping
        for a peer target). Raises MicrobenchError on any wrong word; returns the words checked."""
        cp = self.cp
        slots = self.slots_for(spec) if slots is None else slots
        W, n = spec.words_per_producer, spec.bursts
        vout = cp.zeros(2, dtype=cp.uint64)
        checked = 0
        for reg in self.regions(spec, slots):
            vout.set(np.array([0, np.iinfo(np.uint64).max], dtype=np.uint64))
            grid = (min(4 * self.sm_count, max(1, reg["words"] // 256)),)
            if reg["tags"] is None:
                self.k_verify(grid, (256,), (np.uint64(reg["ptr"]), np.uint32(W), np.uint32(reg["rows"]),
                                             np.uint32(slots), np.uint32(n), vout))
            else:
                tags = cp.zeros(reg["rows"], dtype=cp.uint32)
                tags.set(reg["tags"])
                self.kernel("verify_rows")(grid, (256,), (np.uint64(reg["ptr"]), tags, np.uint32(W),
                                                          np.uint32(reg["rows"]), np.uint32(slots), np.uint32(n), vout))
            bad, first = (int(x) for x in vout.get())
            if bad:
                where = "" if reg["dest"] is None else f" in this sender's region of rank {reg['dest']}'s buffer"
                raise MicrobenchError(f"{spec}: pattern check failed on the device: {bad} of {reg['words']} 16-byte "
                                      f"words wrong{where}, first at word {first}")
            checked += reg["words"]
        return checked

    def corrupt_word(self, spec: BurstSpec, word: int = 5, lane: int = 2, mask: int = 1) -> None:
        """Flip ``mask`` in 32-bit lane ``lane`` of 16-byte word ``word`` of the first region, on the device."""
        reg = self.regions(spec, self.slots_for(spec))[0]
        self.kernel("flip_bits")((1,), (32,), (np.uint64(reg["ptr"] + 16 * word + 4 * lane), np.uint32(mask)))
        self.cp.cuda.runtime.deviceSynchronize()

    def run(self, spec: BurstSpec, *, cpu_verify: bool = False, clock_GHz: float | None = None):
        """Warm-up + trials of one configuration. Returns (frame, info)."""
        cp = self.cp
        if self.timer is None:
            self.probe_timer()
        if spec.producers > self.sm_count:
            raise InputError("producers", spec.producers, f"must be <= the GPU's {self.sm_count} SMs")
        K, W, n = spec.producers, spec.words_per_producer, spec.bursts
        slots = self.slots_for(spec)
        regions = self.regions(spec, slots)
        words = sum(r["words"] for r in regions)
        kernel, head = self._burst_launch(spec, regions)
        gap_kind = GAP_KINDS.index(spec.gap_kind)
        ghz = clock_GHz or self.timer["sm_clock_GHz"]
        gap_param = {0: int(round(spec.gap_us * 1e3)), 1: int(round(spec.gap_us * 1e3 * ghz)),
                     2: int(spec.fma_iters)}[gap_kind]
        rec = cp.zeros((K, n, NREC), dtype=cp.uint64)
        sm_of = cp.zeros(K, dtype=cp.uint32)
        sink = cp.zeros(K, dtype=cp.float32)
        err = cp.zeros(1, dtype=cp.int32)
        counter = cp.zeros(1, dtype=cp.uint32)
        frames, clocks = [], []
        for trial in range(-spec.warmup, spec.trials):
            for reg in regions:
                self.k_fill((min(4 * self.sm_count, max(1, reg["words"] // 256)),), (256,),
                            (np.uint64(reg["ptr"]), np.uint64(reg["words"])))
            counter.fill(0)
            err.fill(0)
            rec.fill(0)
            if self.target.sync is not None:   # all-to-all: every rank starts the trial together
                self.target.sync()
            ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
            ev0.record()
            kernel((K,), (spec.threads,),
                   (*head, np.uint32(W), np.uint32(slots), np.uint32(n), np.uint32(MODES.index(spec.mode)),
                    np.uint32(gap_kind), np.uint64(gap_param), np.uint64(int(spec.settle_us * 1e3)),
                    np.uint64(self.timeout_ns), counter, rec, sm_of, sink, err),
                   shared_mem=self.pad_bytes)
            ev1.record()
            ev1.synchronize()
            cp.cuda.runtime.deviceSynchronize()
            kernel_us = float(cp.cuda.get_elapsed_time(ev0, ev1)) * 1e3  # launch to completion, drain included
            code = int(err.get()[0])
            if code:
                raise MicrobenchError(f"{spec}: {ERRORS.get(code, f'error {code}')}")
            sms = sm_of.get()
            if len(set(sms.tolist())) != K:
                raise MicrobenchError(f"{K} producers ran on only {len(set(sms.tolist()))} SMs")
            self.verify(spec, slots)
            if cpu_verify and self.target.host_view() is not None:
                check_pattern(self.target.host_view()[: words * 4], K, W, slots, n)
            if trial < 0:
                continue
            frame, ghz_run = self._frame(spec, rec.get().astype(np.int64), sms, trial)
            frame["kernel(us)"] = kernel_us
            frames.append(frame)
            clocks.append(ghz_run)
        info = {"slots": slots, "buffer_words": words, "gap_param": gap_param, "sm_clock_GHz_runs": clocks,
                "timebase": self.timer["timebase"], "verified_words": words * (spec.trials + spec.warmup),
                "cpu_verified": bool(cpu_verify and self.target.host_view() is not None),
                "peer_pattern": self.target.pattern, "destinations": [r["dest"] for r in regions]}
        return pd.concat(frames, ignore_index=True), info

    def _frame(self, spec: BurstSpec, r: np.ndarray, sms: np.ndarray, trial: int):
        K, n = spec.producers, spec.bursts
        gt0, gt1, ck0, ck1, gtf, gtg = (r[:, :, j] for j in range(NREC))
        span_ns = (gt1[:, -1] - gt0[:, 0]).astype(float)   # same endpoints as the clock64 span
        ghz = float(np.median((ck1[:, -1] - ck0[:, 0]) / np.maximum(span_ns, 1.0)))
        t_base = gt0.min()
        issue_gt = (gt1 - gt0) / 1e3
        issue_ck = (ck1 - ck0) / ghz / 1e3
        period = np.full((K, n), np.nan)
        if self.timer["timebase"] == "globaltimer":
            issue = issue_gt
            period[:, :-1] = np.diff(gt0, axis=1) / 1e3
        else:
            issue = issue_ck
            period[:, :-1] = np.diff(ck0, axis=1) / ghz / 1e3
        fence = np.where(gtf > 0, (gtf - gt0) / 1e3, np.nan)
        gap_meas = period - issue
        nominal = spec.gap_us if spec.gap_kind != "fma" else float(np.nanmedian(gap_meas)) if n > 1 else 0.0
        frame = pd.DataFrame({
            "source": "hw", "platform": "", "target": self.target.name, "mode": spec.mode,
            "producers": K, "bytes_per_producer": spec.bytes_per_producer, "gap(us)": nominal,
            "producer": np.repeat(np.arange(K), n), "burst": np.tile(np.arange(n), K),
            "start(us)": ((gt0 - t_base) / 1e3).ravel(), "issue(us)": issue.ravel(),
            "period(us)": period.ravel(),
            "trial": trial, "gap_kind": spec.gap_kind, "fma_iters": spec.fma_iters,
            "gap_measured(us)": gap_meas.ravel(), "issue_gt(us)": issue_gt.ravel(),
            "issue_clk(us)": issue_ck.ravel(), "fence(us)": fence.ravel(), "sm": np.repeat(sms.astype(int), n),
        })
        return frame, ghz

    def close(self):
        self.target.close()


def _aggregate_bursts(t: pd.DataFrame) -> dict:
    """Lockstep / isolated trial: burst b's aggregate issue time is max(end) - min(start) over the
    producers (all start after the same barrier); its period is min(start) to the next min(start).
    Steady bursts: the second half (periodic) or all but the first (isolated)."""
    n = int(t["burst"].max()) + 1
    end = t["start(us)"] + t["issue(us)"]
    g = t.assign(end=end, fenced=t["start(us)"] + t["fence(us)"]).groupby("burst")
    start_b, end_b, fence_b = g["start(us)"].min(), g["end"].max(), g["fenced"].max()
    issue_b = end_b - start_b
    period_b = start_b.shift(-1) - start_b
    keep = start_b.index >= (1 if t["mode"].iloc[0] == "isolated" else n // 2)
    issue, period = issue_b[keep], period_b[keep].dropna()
    return {"issue": float(issue.median()), "period": float(period.median()) if len(period) else np.nan,
            "gap": float((period_b - issue_b)[keep].median()), "fence": float((fence_b - start_b)[keep].median()),
            "producer_issue": float(t.loc[t["burst"].isin(start_b.index[keep]), "issue(us)"].median())}


def _free_window(t: pd.DataFrame) -> dict:
    """Free-running trial: aggregate figures over the window [T/2, T], T = the earliest time a
    producer starts its last burst (all producers are active in it). Each producer's burst rate in
    the window is (bursts - 1) / (last start - first start); period = K / sum of the rates
    (= V / aggregate rate); T_iss = mean issue time of the bursts in the window."""
    T = float(t.groupby("producer")["start(us)"].max().min())
    w = t[(t["start(us)"] >= T / 2) & (t["start(us)"] <= T)]
    if len(w) == 0 or T <= 0:
        return {"issue": np.nan, "period": np.nan, "gap": np.nan, "fence": np.nan, "producer_issue": np.nan}
    rates = []
    for _, q in w.groupby("producer"):
        c, span = len(q), float(q["start(us)"].max() - q["start(us)"].min())
        rates.append((c - 1) / span if c >= 2 and span > 0 else c / (T / 2))
    K = int(t["producer"].nunique())
    rates += [0.0] * (K - len(rates))
    period = K / sum(rates) if sum(rates) > 0 else np.nan
    issue = float(w["issue(us)"].mean())
    return {"issue": issue, "period": period, "gap": period - issue, "fence": np.nan,
            "producer_issue": float(w["issue(us)"].median())}


def summarize_run(frame: pd.DataFrame) -> dict:
    """Aggregate burst figures of one configuration, per trial, then the median over trials.

    T_iss_us / period_us describe the aggregate burst of V = K * B bytes (see `_aggregate_bursts`,
    `_free_window`); T_iss_producer_us is the median single-producer issue time, for reference.
    """
    for col in ("fence(us)", "kernel(us)"):
        if col not in frame:
            frame = frame.assign(**{col: np.nan})
    rows = []
    for _, t in frame.groupby("trial"):
        row = _free_window(t) if t["mode"].iloc[0] == "free" else _aggregate_bursts(t)
        nbytes = float(t["bytes_per_producer"].iloc[0]) * len(t)   # every burst of every producer
        row["kernel_GBps"] = nbytes / float(t["kernel(us)"].iloc[0]) / 1e3
        rows.append(row)
    per_trial = pd.DataFrame(rows)
    return {"T_iss_us": float(per_trial["issue"].median()), "period_us": float(per_trial["period"].median()),
            "gap_measured_us": float(per_trial["gap"].median()), "fence_us": float(per_trial["fence"].median()),
            "T_iss_producer_us": float(per_trial["producer_issue"].median()),
            "kernel_GBps": float(per_trial["kernel_GBps"].median()),   # all bytes / CUDA-event kernel time
            "T_iss_spread": float(per_trial["issue"].max() / per_trial["issue"].min() - 1.0),
            "trials": int(len(per_trial))}


# --- self-test -------------------------------------------------------------------------------------

def selftest(target_name: str = "host", small: bool = False, timeout_ms: float = 2000.0,
             peer_pattern: str = "next") -> dict:
    """Timer tick, pattern checks in both modes and all gap kinds, and a corruption check (on the
    CPU for the host target, else on the device: a word flipped through the same mapping)."""
    from xstage.hw.common.targets import open_target

    out = {"target": target_name}
    K = 4 if small else 16
    target = open_target(target_name, 4 * 64 * 1024 * (132 if not small else 8), self_peer=True,
                         peer_pattern=peer_pattern)
    if target.name == "peer":
        out.update(peer_pattern=target.pattern, rank=target.info["rank"], world_size=target.info["world_size"])
    try:
        mb = Microbench(target, timeout_ms=timeout_ms)
        out["timer"] = mb.probe_timer(reads=1024 if small else 4096, span_us=500 if small else 2000)
        print(f"[selftest] %globaltimer tick {out['timer']['tick_ns']:.0f} ns, distinct deltas "
              f"{out['timer']['distinct_deltas_ns']}, SM clock {out['timer']['sm_clock_GHz']:.3f} GHz, "
              f"timebase {out['timer']['timebase']}", file=sys.stderr)
        runs = []
        for spec in (BurstSpec(K, 4096, 0.0, bursts=6, trials=1),
                     BurstSpec(K, 4096, 1.0, mode="free", bursts=6, trials=1),
                     BurstSpec(K, 8192, 2.0, mode="isolated", bursts=5, trials=1, settle_us=2.0),
                     BurstSpec(K, 4096, 3.0, gap_kind="clock", bursts=5, trials=1),
                     BurstSpec(K, 4096, gap_kind="fma", fma_iters=200, bursts=5, trials=1),
                     BurstSpec(min(mb.sm_count, 8 if small else 132), 16384, 0.0, bursts=8, trials=1)):
            frame, info = mb.run(spec, cpu_verify=True)
            runs.append({**{k: v for k, v in asdict(spec).items() if k in ("producers", "bytes_per_producer",
                                                                       "mode", "gap_kind")},
                         **summarize_run(frame), "verified_words": info["verified_words"]})
            print(f"[selftest] ok {runs[-1]}", file=sys.stderr)
        out["runs"] = runs
        # the check must catch a lost store: corrupt one word after a run, then check again (on the
        # CPU for the host target; on the device, through the same mapping, for the others)
        spec = BurstSpec(K, 4096, 0.0, bursts=3, trials=1, warmup=0)
        mb.run(spec)
        try:
            if target.host_view() is not None:
                view = target.host_view()
                view[4 * 5 + 2] ^= 1
                check_pattern(view[: mb.slots_for(spec) * K * spec.words_per_producer * 4], K,
                              spec.words_per_producer, mb.slots_for(spec), spec.bursts)
            else:
                mb.corrupt_word(spec, word=5, lane=2, mask=1)
                mb.verify(spec)
        except MicrobenchError as err:
            out["corruption_caught"] = str(err)
        else:
            raise MicrobenchError("a corrupted word was NOT caught by the pattern check")
        print(f"[selftest] corrupted word caught: {out['corruption_caught'][:80]}...", file=sys.stderr)
    finally:
        target.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m xstage.hw.microbench.runner", description=__doc__.splitlines()[0])
    ap.add_argument("--selftest", action="store_true", help="run the correctness self-test")
    ap.add_argument("--target", default="host", choices=("host", "local", "peer"),
                    help="peer: torch symmetric memory, the next rank (itself at world size 1)")
    ap.add_argument("--peer-pattern", default="next",
                    help="peer target: next (one sender -> the next rank) or all (all-to-all: each rank's "
                    "producers spread over every other rank, all ranks at once)")
    ap.add_argument("--small", action="store_true", help="tiny sizes (for compute-sanitizer)")
    ap.add_argument("--timeout-ms", type=float, default=2000.0, help="bound of every in-kernel spin")
    args = ap.parse_args(argv)
    if not args.selftest:
        ap.print_help()
        return 2
    t = time.perf_counter()
    try:
        out = selftest(args.target, args.small, args.timeout_ms, args.peer_pattern)
    except InputError as err:
        print(f"microbench: error: {err}", file=sys.stderr)
        return 2
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:                  # under torchrun every rank checks its own stores; rank 0 prints the JSON
        from xstage.cli import print_json
        print_json(out)
    print(f"[selftest] rank {rank}: passed in {time.perf_counter() - t:.1f} s"
          + (f" ({out['corruption_caught'][:60]}...)" if rank else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    from xstage.errors import exit_with

    exit_with(main, "microbench")
