"""Remote-store microbenchmark (the X-Stage paper, Sec. 3.1) on a real GPU.

Run the self-test (timer tick, pattern checks, a corrupted-word check) on a GPU machine:

    python -m xstage.hw.microbench.runner --selftest [--target host|local] [--small]
    torchrun --standalone --nproc-per-node=8 -m xstage.hw.microbench.runner --selftest --target peer --peer-pattern all

(flags: ``xstage.cli.bench_microbench``; the configuration: ``spec.py``; the expected buffer contents and
the timer probe: ``pattern.py``; a run's aggregate figures: ``xstage.sim.burst_summary``).

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

End fence (``BurstSpec.end_fence``, not isolated mode, zero gap; session 8): after the burst loop (the last
burst's issue end, its gap being zero) every thread runs __threadfence_system and thread 0 reads %globaltimer;
the frame then has ``end_fence(us)`` on the last burst's rows (from the run's first burst start, as
``start(us)``; NaN elsewhere), so max over producers is the run's drained time: first issue to the last byte
drained (the host probe's ``fence_us``). It is a build of its own (``burst_kernel_end_fence``: a template
argument of ``microbench.cu`` used after the loop), so the kernel without it is the one from before the end
fence existed and the loop of the one with it is the same source (session 9: as a run-time flag inside the loop
it read free-running issue spans 2-3 timer ticks longer; ``benchmarks/gpu/microbench_ab.py`` compares builds, record and
figures in docs/calibration/microbench-build.md), and the records and their columns are as before.
"""


from importlib import resources

import numpy as np
import pandas as pd

from xstage.errors import InputError
from xstage.hw.microbench.pattern import (MicrobenchError, check_pattern, expected_buffer,  # noqa: F401 - re-exported
                                          last_burst_of_slot, pattern_words, tick_from_reads)
from xstage.hw.microbench.spec import GAP_KINDS, MODES, BurstSpec  # noqa: F401 - re-exported
from xstage.sim.burst_summary import summarize_run  # noqa: F401 - re-exported

NREC = 6                      # u64 per burst, see microbench.cu
COARSE_TICK_NS = 64.0         # above this the durations use clock64
ERRORS = {1: "grid barrier timed out (CTAs not co-resident?)", 2: "a spin loop hit its iteration bound"}


def cuda_source(name: str) -> str:
    """The text of this package's CUDA file ``name`` with its ``#include "xstage_sync.cuh"`` replaced by the
    header (NVRTC through CuPy or Numba compiles one string; nvcc would find the header beside the file)."""
    folder = resources.files("xstage.hw.microbench")
    header = (folder / "xstage_sync.cuh").read_text()
    return (folder / name).read_text().replace('#include "xstage_sync.cuh"', header)


def kernel_source() -> str:
    """The store kernel's source (``microbench.cu`` with the shared helpers inlined)."""
    return cuda_source("microbench.cu")


class Microbench:
    """Compiled kernels plus one target buffer; `run(spec)` returns burst records."""

    supports_end_fence = True     # the put path (puts.PutMicrobench) has no end fence

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
        """(kernel, leading arguments) of the burst kernel: the buffer, or the destination tables; its end-fence
        build (``*_end_fence``, a template argument of microbench.cu) where the spec asks for the end fence."""
        lay = self.target.layout(spec.producers)
        fence = "_end_fence" if spec.end_fence else ""
        if lay is None:
            return (self.kernel("burst_kernel" + fence) if fence else self.k_burst), (np.uint64(regions[0]["ptr"]),)
        cp = self.cp
        index = {r["dest"]: k for k, r in enumerate(regions)}
        table = cp.zeros(len(regions), dtype=cp.uint64)
        table.set(np.array([r["ptr"] for r in regions], dtype=np.uint64))
        dst_of = cp.zeros(spec.producers, dtype=cp.uint32)
        dst_of.set(np.array([index[int(d)] for d in lay.dest_of], dtype=np.uint32))
        row_of = cp.zeros(spec.producers, dtype=cp.uint32)
        row_of.set(lay.row_of.astype(np.uint32))
        return self.kernel("burst_kernel_multi" + fence), (table, dst_of, row_of, np.uint32(lay.rows), np.uint32(lay.tag_base))

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
        if spec.end_fence and not self.supports_end_fence:
            raise InputError("end_fence", spec.end_fence, f"has no kernel in {type(self).__name__} (store path only)")
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
        if spec.end_fence:        # the last burst's drain; not a per-burst fence (that column stays NaN)
            end_fence = np.where(gtf > 0, (gtf - t_base) / 1e3, np.nan)
            fence = np.full_like(fence, np.nan)
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
        if spec.end_fence:
            frame["end_fence(us)"] = end_fence.ravel()
        return frame, ghz

    def close(self):
        self.target.close()


if __name__ == "__main__":  # the flags: xstage.cli.bench_microbench
    from xstage.cli.bench_microbench import NAME, main
    from xstage.errors import exit_with

    exit_with(main, NAME)
