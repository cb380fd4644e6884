"""Host-path probe (issue 15, item 2): what the PCIe host path does under long zero-gap bursts.

    python benchmarks/gpu/host_probe.py --out DIR [--budget-s 200] [--total-MiB 192]

Kernel: ``host_probe.cu`` beside this file (one CTA per SM, free-running, no gap, no fence between
bursts; the microbenchmark's 16-byte pattern words). For every K in 8..132, B in 4..256 KiB, destination
``fresh`` (every burst new addresses, slots = n) or ``rewritten`` (slots = 1) and end fence ``system``
(__threadfence_system before the done flag) or ``gpu`` (GPU-scope __threadfence: the flag may overtake
data): n = clamp(total / (K B), 8, 8192) bursts, so every run moves about ``--total-MiB``.

Completion is seen four ways per trial:
    kernel_us        CUDA events around the launch (the kernel ends after every CTA's end fence)
    fence_us         first burst start -> the last CTA's end fence returned (%globaltimer)
    flag_host_us     a host thread (this process) polling pinned memory: start flag seen -> done flag seen
                     (the start flag is written by CTA 0 right after the common start, the done flag by
                     the last CTA after its fence); ``missing_at_flag``: producers whose last word was not
                     yet in host memory when the done flag was seen
    copy engine      cudaMemcpyAsync device -> the same pinned memory (copy.csv.gz), for the link's rate
Sender side: per burst and producer the issue span (start -> stores issued + __syncthreads); bursts.csv.gz
keeps, per configuration (first trial) and burst index, quantiles over producers (start, end, span),
producers.csv.gz per trial and producer its SM (``%smid``), its last issue end, the end of its burst n/2 - 1 and its
median / p90 span (which SMs win, run to run), and runs.csv.gz the
sender-side times at which 10 %, 20 %, ... 100 % of the bytes were issued, from which the outstanding
bytes (issued - drained at R) when the issuer slows are estimated (benchmarks/host_probe_fit.py).

Correctness: the destination is poisoned (0xFF) before the first trial of every configuration and checked
after it (producer, burst and offset fields of every word; the hash on a 1/64 sample). Each spin is
bounded; a failed check or an error flag stops the run with a message. Writes DIR/runs.csv.gz,
DIR/bursts.csv.gz, DIR/producers.csv.gz, DIR/copy.csv.gz, DIR/meta.json (provenance, grid, timings).
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

KiB, MiB = 1024, 1024 * 1024
KS = (8, 16, 32, 64, 132)
BS = tuple(b * KiB for b in (4, 16, 32, 64, 128, 256))
THREADS = 512


def _grid(sm_count, quick, ks=KS):
    ks = [k for k in ks if k <= sm_count] if not quick else [16, min(132, sm_count)]
    bs = BS if not quick else (32 * KiB, 128 * KiB)
    for fence in ("system", "gpu"):
        for dest in ("fresh", "rewritten"):
            for k in ks:
                for b in bs:
                    yield k, b, dest, fence


class Probe:
    def __init__(self, max_bytes):
        import cupy
        from xstage.hw.common.targets import host_buffer
        self.cp = cupy
        from xstage.hw.microbench.runner import kernel_source
        src = kernel_source() + "\n" + Path(__file__).with_name("host_probe.cu").read_text()   # its helpers
        self.k = cupy.RawModule(code=src, options=("--std=c++17",)).get_function("host_probe")
        attrs = cupy.cuda.Device().attributes
        self.sm_count = int(attrs["MultiProcessorCount"])
        per_sm = int(attrs.get("MaxSharedMemoryPerMultiprocessor", 228 * KiB))
        optin = int(attrs.get("MaxSharedMemoryPerBlockOptin", 227 * KiB))
        self.pad = min(optin - 1024, per_sm // 2 + 4096)
        self.k.max_dynamic_shared_size_bytes = self.pad
        self.buf = host_buffer(max_bytes)
        self.flags_buf = host_buffer(4096)
        self.view = self.buf.host_view()
        self.flags = self.flags_buf.host_view()
        self.counter = cupy.zeros(2, dtype=cupy.uint32)
        self.err = cupy.zeros(1, dtype=cupy.int32)
        self.tag = 0

    def run(self, K, B, n, slots, fence_end):
        cp = self.cp
        wpp = B // 16
        rec = cp.zeros(2 * K * n, dtype=cp.uint64)
        fin = cp.zeros(2 * K, dtype=cp.uint64)
        sm_of = cp.zeros(K, dtype=cp.uint32)
        self.counter.fill(0)
        self.err.fill(0)
        self.tag += 1
        tag = self.tag
        self.flags[:2] = 0
        cp.cuda.runtime.deviceSynchronize()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        flags = self.flags
        last = self.view.reshape(-1, 4)
        slot = (n - 1) % slots
        idx = (slot * K + np.arange(K)) * wpp + wpp - 1
        e0.record()
        t_launch = time.perf_counter_ns()
        self.k((K,), (THREADS,), (np.uint64(self.buf.ptr), np.uint32(wpp), np.uint32(slots), np.uint32(n),
                                  np.uint32(fence_end), np.uint32(tag), np.uint64(2_000_000_000), self.counter,
                                  np.uint64(self.flags_buf.ptr), rec, fin, sm_of, self.err),
               shared_mem=self.pad)
        e1.record()
        deadline = t_launch + 3_000_000_000
        spins = 0
        while flags[0] != tag:
            spins += 1
            if (spins & 1023) == 0 and time.perf_counter_ns() > deadline:
                break
        t_start = time.perf_counter_ns()
        while flags[1] != tag:
            spins += 1
            if (spins & 1023) == 0 and time.perf_counter_ns() > deadline:
                break
        t_done = time.perf_counter_ns()
        words = last[idx]
        missing = int(np.sum((words[:, 1] != n - 1) | (words[:, 0] != np.arange(K))))
        e1.synchronize()
        t_sync = time.perf_counter_ns()
        if int(self.err.get()[0]):
            raise RuntimeError(f"K={K} B={B}: the common start barrier timed out")
        if flags[1] != tag:
            raise RuntimeError(f"K={K} B={B}: the done flag never arrived")
        if len(set(sm_of.get().tolist())) != K:
            raise RuntimeError(f"K={K}: producers shared an SM")
        r = rec.get().reshape(K, n, 2).astype(np.int64)
        f = fin.get().reshape(K, 2).astype(np.int64)
        t0 = int(r[:, 0, 0].min())
        return {"rec_us": (r - t0) / 1e3, "sm_of": sm_of.get().astype(np.int64), "fence_us": (f[:, 0].max() - t0) / 1e3,
                "flag_written_us": (f[:, 1].max() - t0) / 1e3,
                "kernel_us": cp.cuda.get_elapsed_time(e0, e1) * 1e3,
                "flag_host_us": (t_done - t_start) / 1e3, "launch_to_start_host_us": (t_start - t_launch) / 1e3,
                "launch_to_sync_host_us": (t_sync - t_launch) / 1e3, "missing_at_flag": missing}

    def poison(self, nbytes):
        self.view[: nbytes // 4] = 0xFFFFFFFF

    def verify(self, K, B, n, slots):
        from xstage.hw.microbench.pattern import pattern_words
        wpp = B // 16
        w = self.view[: slots * K * wpp * 4].reshape(slots, K, wpp, 4)
        burst = np.array([s + ((n - 1 - s) // slots) * slots for s in range(slots)], dtype=np.uint32)
        ok = (np.all(w[..., 0] == np.arange(K, dtype=np.uint32)[None, :, None])
              and np.all(w[..., 1] == burst[:, None, None]) and np.all(w[..., 2] == np.arange(wpp, dtype=np.uint32)))
        sample = w.reshape(-1, 4)[::64]
        flat = np.arange(0, slots * K * wpp, 64)
        s_, rest = np.divmod(flat, K * wpp)
        p_, i_ = np.divmod(rest, wpp)
        exp = pattern_words(p_, burst[s_], i_)
        return bool(ok and np.array_equal(sample, exp))

    def copy_engine(self, sizes, trials=3):
        cp = self.cp
        rows = []
        for size in sizes:
            src = cp.ones(size // 4, dtype=cp.uint32)
            for t in range(trials + 1):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record()
                cp.cuda.runtime.memcpyAsync(self.buf.ptr, src.data.ptr, size, 2, cp.cuda.get_current_stream().ptr)
                e1.record()
                e1.synchronize()
                if t:
                    us = cp.cuda.get_elapsed_time(e0, e1) * 1e3
                    rows.append({"bytes": size, "trial": t - 1, "time_us": us, "GBps": size / us / 1e3})
            del src
        return rows


def _summarize(K, B, n, dest, fence, trial, out, total):
    rec = out["rec_us"]
    start, end = rec[..., 0], rec[..., 1]
    span = end - start
    ends = np.sort(end.ravel())
    frac = np.arange(1, 11) / 10
    at = ends[np.minimum((frac * ends.size).astype(int) - 1, ends.size - 1)]
    row = {"producers": K, "bytes_per_producer": B, "bursts": n, "dest": dest, "fence": fence, "trial": trial,
           "total_bytes": total, "issue_end_us": float(end.max()), "span_first4_median_us": float(np.median(span[:, :4])),
           "span_median_us": float(np.median(span)), "span_last_quarter_median_us": float(np.median(span[:, -max(1, n // 4):])),
           **{k: out[k] for k in ("fence_us", "flag_written_us", "kernel_us", "flag_host_us", "launch_to_start_host_us",
                                  "launch_to_sync_host_us", "missing_at_flag")}}
    row.update({f"issued_{int(f * 100)}pct_us": float(a) for f, a in zip(frac, at)})
    bursts = pd.DataFrame({"producers": K, "bytes_per_producer": B, "dest": dest, "fence": fence, "trial": trial,
                           "burst": np.arange(n), "start_min_us": start.min(0), "start_median_us": np.median(start, 0),
                           "end_median_us": np.median(end, 0), "end_max_us": end.max(0),
                           "span_median_us": np.median(span, 0), "span_p90_us": np.percentile(span, 90, axis=0)})
    half = max(0, n // 2 - 1)
    producers = pd.DataFrame({"producers": K, "bytes_per_producer": B, "dest": dest, "fence": fence, "trial": trial,
                              "producer": np.arange(K), "sm": out["sm_of"], "end_last_us": end[:, -1],
                              "end_half_us": end[:, half], "span_median_us": np.median(span, 1),
                              "span_p90_us": np.percentile(span, 90, axis=1)})
    return row, bursts, producers


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--total-MiB", type=float, default=192.0)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ks", default=",".join(map(str, KS)), help="producer counts, comma-separated (default: %(default)s)")
    a = ap.parse_args(argv)
    try:
        ks = tuple(int(k) for k in a.ks.split(","))
    except ValueError:
        ks = ()
    if not ks or min(ks) < 1:
        print(f"--ks(={a.ks}) must be positive integers, comma-separated", file=sys.stderr)
        return 2
    from xstage.provenance import provenance
    wall = time.time()
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    total = int(a.total_MiB * MiB)
    max_bytes = max(total, max(KS) * max(BS) * 8) + MiB
    probe = Probe(max_bytes)
    probe.run(16, 32 * KiB, 16, 16, 1)      # warm-up: module load, first launch
    rows, bursts, producers, skipped = [], [], [], 0
    for K, B, dest, fence in _grid(probe.sm_count, a.quick, ks):
        if time.time() - wall > a.budget_s:
            skipped += 1
            continue
        n = int(min(8192, max(8, math.ceil(total / (K * B)))))
        slots = n if dest == "fresh" else 1
        probe.poison(slots * K * B)
        for t in range(a.trials):
            out = probe.run(K, B, n, slots, int(fence == "system"))
            if t == 0 and fence == "system" and not probe.verify(K, B, n, slots):
                print(f"VERIFY FAILED K={K} B={B} dest={dest}", file=sys.stderr)
                return 1
            row, b, prod = _summarize(K, B, n, dest, fence, t, out, n * K * B)
            row["verified"] = t == 0 and fence == "system"
            rows.append(row)
            producers.append(prod)
            if t == 0:
                bursts.append(b)
        r = rows[-1]
        print(f"K={K:3d} B={B // KiB:3d}K {dest:9s} {fence:6s} n={n:5d} span0={r['span_first4_median_us']:.3f} "
              f"issue_end={r['issue_end_us']:.0f} fence={r['fence_us']:.0f} host={r['flag_host_us']:.0f} "
              f"kernel={r['kernel_us']:.0f} us  GB/s issue {n * K * B / r['issue_end_us'] / 1e3:.1f} "
              f"fence {n * K * B / r['fence_us'] / 1e3:.1f} host {n * K * B / r['flag_host_us'] / 1e3:.1f} "
              f"missing {r['missing_at_flag']}", flush=True)
    copy = pd.DataFrame(probe.copy_engine([4 * MiB, 32 * MiB, 192 * MiB]))
    print(copy.groupby("bytes")["GBps"].median().to_string(), flush=True)
    pd.DataFrame(rows).to_csv(out_dir / "runs.csv.gz", index=False)
    pd.concat(bursts, ignore_index=True).to_csv(out_dir / "bursts.csv.gz", index=False)
    pd.concat(producers, ignore_index=True).to_csv(out_dir / "producers.csv.gz", index=False)
    copy.to_csv(out_dir / "copy.csv.gz", index=False)
    meta = {"kind": "host-probe", "provenance": provenance(with_gpu=True), "total_bytes_target": total,
            "trials": a.trials, "threads_per_cta": THREADS, "grid": {"K": list(ks), "B": list(BS)},
            "configs_skipped_for_budget": skipped, "wall_s": time.time() - wall, "protocol": __doc__}
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    print(f"{len(rows)} runs, {skipped} configurations skipped, {time.time() - wall:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
