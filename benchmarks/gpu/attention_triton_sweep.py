"""The Triton FA-A2A variants at fine steps in M and at another head count (issue 15 item 5, the tenth FA rule).

``attention_triton_heldout.measure`` (same kernels, checks, paired residuals and instrumented launches) over
(M, heads) pairs, so that the jump in ``fused_wb_split``'s residual between 52K and 56K (3 heads) can be placed and
told apart: one head's K/V bytes (2 x M x d x 2) against the L2, or the wave count / tail of the tile grid (6 heads
at M/2 has the tile grid of 3 heads at M with half of the K/V bytes per head). The device's L2 size and SM count go
in the run's meta. Tile logs are kept for programs on even SMs only (the record stays small). Records under
``--out``: ``attention-kernel.parquet``, ``attention-tile.parquet``, ``attention-checks.json`` (saved after every pair).

    python benchmarks/gpu/attention_triton_sweep.py --out $OUT/sweep --points 47104:3,51200:3,28672:6 --trials 8
"""

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def points(text: str) -> list:
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        m, _, h = item.partition(":")
        if not (m.isdigit() and (h or "3").isdigit()):
            raise SystemExit(f"--points: {item!r} must be M or M:heads")
        out.append((int(m), int(h or 3)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--points", required=True, help="comma-separated M[:heads] (heads 3 when left out)")
    ap.add_argument("--trials", type=int, default=8)
    args = ap.parse_args(argv)
    pts = points(args.points)
    import torch

    from attention_triton_heldout import measure
    from xstage.hw.attention.config import AttentionConfig
    from xstage.hw.common.log import hw_log
    from xstage.hw.common.timing import gpu_clocks
    from xstage.records.attention import save_run

    props = torch.cuda.get_device_properties(0)
    dev = {"name": props.name, "L2_cache_size": int(getattr(props, "L2_cache_size", -1)),
           "sm_count": int(props.multi_processor_count)}
    hw_log(f"device: {dev}; clocks (sm, mem, temp, power, reasons): {gpu_clocks()}")
    t0 = time.time()
    base = AttentionConfig(16384, 3, 128, 8, block_n=128, num_stages=3, tma=True, store_cache=".wt",
                           stagger=True, split_tail=True)
    rows, tiles, checks = [], [], []
    for M, heads in pts:
        r, t, c = measure(replace(base, seq_len=M, heads=heads), args.trials)
        t = [f[f["sm"] % 2 == 0] for f in t]
        rows, tiles, checks = rows + r, tiles + t, checks + c
        save_run(Path(args.out), rows, tiles, checks, {"args": vars(args), "kernel": base.label(), "device": dev},
                 overwrite=True)
        fa = next(x for x in r if x["variant"] == "fa")["time(us)"]
        hw_log(f"  M={M} H={heads}: fa {fa:.0f} us, " + ", ".join(f"{x['variant']} {x['paired_minus_fa(us)']:.0f}"
                                                                 for x in r if "paired_minus_fa(us)" in x)
               + f" ({time.time() - t0:.0f}s)")
    failed = [c for c in checks if c.get("ok") is False]
    hw_log(f"checks: {len(checks)} rows, {len(failed)} failed; wall {time.time() - t0:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
