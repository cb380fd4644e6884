"""Does a build of the store microbenchmark's kernel change what it measures? (session 9)

Compiles several sources of ``microbench.cu`` (``--source NAME=PATH``, each with its ``#include
"xstage_sync.cuh"`` inlined from this checkout; the default ``current`` is this checkout's) and runs the same
burst configurations through each build of ``burst_kernel`` on one GPU, interleaved: for every repeat, every
configuration, every build in turn. Runs without the end fence only, so every build gets the same arguments.
Per (build, configuration, repeat): T_iss, period, the median producer issue span and the kernel's bytes over
its time (``xstage.sim.burst_summary.summarize_run``, as ``xstage calibrate`` reports them). ``--end-fence``
adds this checkout's end-fence build (``burst_kernel_end_fence``, run with ``end_fence=True``) on the zero-gap
configurations, as the build ``current+fence``. Writes a JSON
record (``--out``, provenance included) and prints one line per configuration: each build's median over
repeats and its ratio to the first build.

    python benchmarks/gpu/microbench_ab.py --source before=OLD.cu --source flag=FLAG.cu --out ab.json

Made to check that the end fence (session 8, dbec454) changed nothing when off: a later session read local
free-running issue spans 0.04-0.06 us longer on records taken with that kernel.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

# (target, K, B KiB, gap us, mode): free-running and lockstep, small and large, both targets
CONFIGS = (("local", 132, 36, 0.0, "free"), ("local", 22, 13, 0.0, "free"), ("local", 94, 120, 2.0, "free"),
           ("local", 132, 32, 0.0, "periodic"), ("local", 8, 4, 0.0, "periodic"),
           ("host", 132, 32, 0.0, "periodic"), ("host", 16, 8, 0.0, "periodic"), ("host", 64, 24, 50.0, "free"))


def build(mb, source: str):
    """Point Microbench ``mb`` at the burst kernel compiled from ``source`` (one CuPy RawModule)."""
    module = mb.cp.RawModule(code=source, options=("--std=c++17", "-lineinfo"))
    k = module.get_function("burst_kernel")
    k.max_dynamic_shared_size_bytes = mb.pad_bytes
    return module, k


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", action="append", default=[], metavar="NAME=PATH",
                    help="a microbench.cu to build beside this checkout's ('current'); repeatable")
    ap.add_argument("--end-fence", action="store_true", help="also this checkout's end-fence build (zero gaps)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bursts", type=int, default=64)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    from xstage.hw.common.targets import open_target
    from xstage.hw.microbench.runner import BurstSpec, Microbench, cuda_source, kernel_source
    from xstage.provenance import provenance
    from xstage.sim.burst_summary import summarize_run

    header = cuda_source("xstage_sync.cuh")
    sources = {"current": kernel_source()}
    for item in args.source:
        name, _, path = item.partition("=")
        if not name or not Path(path).is_file():
            print(f"microbench_ab: --source {item!r}: must be NAME=PATH of a file", file=sys.stderr)
            return 2
        sources[name] = Path(path).read_text().replace('#include "xstage_sync.cuh"', header)

    rows = []
    for target in dict.fromkeys(c[0] for c in CONFIGS):
        mb = Microbench(open_target(target, 1 << 30))
        mb.probe_timer()
        builds = {name: build(mb, src) for name, src in sources.items()}
        if args.end_fence:
            builds["current+fence"] = builds["current"]
        for rep in range(args.repeats):
            for (tgt, K, B, gap, mode) in CONFIGS:
                if tgt != target:
                    continue
                spec = BurstSpec(K, B * 1024, gap, mode=mode, bursts=args.bursts, trials=args.trials, warmup=1)
                for name, (_, kernel) in builds.items():
                    fence = name.endswith("+fence")
                    if fence and (gap > 0 or mode not in ("periodic", "free")):
                        continue
                    mb.k_burst = kernel
                    frame, _ = mb.run(BurstSpec(K, B * 1024, gap, mode=mode, bursts=args.bursts, trials=args.trials,
                                                warmup=1, end_fence=True) if fence else spec)
                    s = summarize_run(frame)
                    rows.append({"build": name, "target": target, "K": K, "B_KiB": B, "gap_us": gap, "mode": mode,
                                 "repeat": rep, **{k: s[k] for k in ("T_iss(us)", "period(us)", "T_iss_producer(us)",
                                                                      "kernel(GBps)")}})
                print(f"[ab] {target} K {K} B {B} KiB gap {gap} {mode} repeat {rep} done", flush=True)
        mb.close()

    names = list(sources) + (["current+fence"] if args.end_fence else [])
    print(f"{'target':>6} {'K':>4} {'B':>4} {'gap':>5} {'mode':>9}  " +
          "  ".join(f"{n + ' T_iss':>16} {'period':>8} {'prod':>7}" for n in names))
    summary = []
    for (tgt, K, B, gap, mode) in CONFIGS:
        sel = [r for r in rows if (r["target"], r["K"], r["B_KiB"], r["gap_us"], r["mode"]) == (tgt, K, B, gap, mode)]
        med = {n: {k: float(np.median([r[k] for r in sel if r["build"] == n] or [np.nan]))
                   for k in ("T_iss(us)", "period(us)", "T_iss_producer(us)")} for n in names}
        summary.append({"target": tgt, "K": K, "B_KiB": B, "gap_us": gap, "mode": mode, "median": med})
        print(f"{tgt:>6} {K:>4} {B:>4} {gap:>5} {mode:>9}  " +
              "  ".join(f"{med[n]['T_iss(us)']:>16.3f} {med[n]['period(us)']:>8.3f} {med[n]['T_iss_producer(us)']:>7.3f}"
                        for n in names))
    Path(args.out).write_text(json.dumps({"what": "microbench builds A/B (benchmarks/gpu/microbench_ab.py)",
                                          "builds": names, "rows": rows, "summary": summary,
                                          "provenance": provenance(with_gpu=True)}, indent=1, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
