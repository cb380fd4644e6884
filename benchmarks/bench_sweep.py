"""Benchmark: the full 84-configuration MoE sweep (expert-wave + interleaved replay of each).

Target (issue 3): <= 60 s on a 2-core machine. Prints wall time, replayed tiles per second and the
summary statistics. Run:  python benchmarks/bench_sweep.py [--jobs 2] [--platform paper-b200]
"""

import argparse
import json
import os
import resource
import time

from xstage.sim.platform import load_platform
from xstage.sim.sweep import summarize_moe, sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--platform", default="paper-b200")
    args = ap.parse_args()
    platform = load_platform(args.platform)
    t = time.perf_counter()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_utime
    frame = sweep("moe", platform, jobs=args.jobs)
    wall = time.perf_counter() - t
    cpu = (resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
           + resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0)
    tiles = 2 * int(frame["tiles"].sum())
    replay_s = float(frame["wave_wall_s"].sum() + frame["int_wall_s"].sum())
    print(f"configs            {len(frame)}")
    print(f"jobs               {args.jobs}  (cpu count {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    print(f"wall time          {wall:.1f} s   (target <= 60 s on 2 cores)")
    print(f"cpu time           {cpu:.1f} core-s -> {cpu / args.jobs:.1f} s wall on {args.jobs} idle cores")
    print(f"tiles replayed     {tiles:,}")
    print(f"throughput         {tiles / cpu:,.0f} tiles per CPU-second (schedules + replay), "
          f"{tiles / replay_s:,.0f} tiles per wall-second inside replay()")
    s = summarize_moe(frame)
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in s.items()
                      if not isinstance(v, dict)}, indent=1))


if __name__ == "__main__":
    main()
