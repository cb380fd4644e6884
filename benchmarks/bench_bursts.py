"""Producer-bursts per second of the fluid X-Stage core, beside the chunked (4 KiB) cross-check.

Target (issue 2, sec. 7): >= 100,000 producer-bursts/s for K = 132 producers x 2,000 bursts, and >= 10x the
chunked mode in the same run. The chunked mode runs fewer bursts (it is slow); rates are per burst.

    python benchmarks/bench_bursts.py [--bursts 2000] [--chunked-bursts 50]
"""

import argparse
import json
import platform as _platform

from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import load_platform


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--producers", type=int, default=132)
    ap.add_argument("--bursts", type=int, default=2000)
    ap.add_argument("--chunked-bursts", type=int, default=40)
    ap.add_argument("--platform", default="paper-b200")
    args = ap.parse_args()
    platform = load_platform(args.platform)
    rows = []
    for gap in (0.0, 2.0, 10.0):
        fluid = simulate_bursts(platform, BurstConfig(args.producers, 32 * 1024, gap, args.bursts),
                                record_occupancy=False)
        chunk = simulate_bursts(platform, BurstConfig(args.producers, 32 * 1024, gap, args.chunked_bursts,
                                                      queue="chunked", chunk_bytes=4096), record_occupancy=False)
        f, c = fluid.summary(platform), chunk.summary(platform)
        rows.append({"gap_us": gap, "fluid_bursts_per_s": round(f["bursts_per_s"]),
                     "chunked_bursts_per_s": round(c["bursts_per_s"]),
                     "ratio": round(f["bursts_per_s"] / c["bursts_per_s"], 1),
                     "fluid_T_iss_us": round(f["T_iss_us"], 4), "chunked_T_iss_us": round(c["T_iss_us"], 4),
                     "fluid_wall_s": round(fluid.wall_s, 2)})
    print(f"# K={args.producers}, B=32KiB, fluid {args.bursts} bursts/producer, chunked {args.chunked_bursts}; "
          f"{_platform.processor() or _platform.machine()}, python {_platform.python_version()}")
    print(f"{'gap_us':>7} {'fluid/s':>10} {'chunked/s':>10} {'ratio':>7} {'T_iss fluid':>12} {'T_iss chunk':>12}")
    for r in rows:
        print(f"{r['gap_us']:>7} {r['fluid_bursts_per_s']:>10} {r['chunked_bursts_per_s']:>10} {r['ratio']:>7} "
              f"{r['fluid_T_iss_us']:>12} {r['chunked_T_iss_us']:>12}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
