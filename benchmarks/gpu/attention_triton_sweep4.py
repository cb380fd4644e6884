"""The Triton FA-A2A variants at two head dims, repeated and interleaved (issue 15 item 5, the eleventh FA rule).

``attention_triton_heldout.measure`` (same kernels, checks, paired residuals and instrumented launches) over
(M, heads, head dim) points, each measured ``--repeats`` times with fresh random inputs (seed 2 + repeat). The
repeats are interleaved: repeat r runs every point, in the point order rotated by r, before repeat r + 1 starts,
so a drift of the machine over the call (clock, temperature) falls on every point alike and the spread over
repeats measures the run-to-run variation. Head dim 64 halves one head's K/V bytes (2 x M x d x 2) at the same M
and Q-loop length, which separates the L2 (K/V bytes per head) from M. Every row and tile carries ``rep`` (and
tiles ``head_dim`` and ``heads``); the device's L2 size and SM count go in the run's meta; tile logs are kept for
programs on even SMs only. Records under ``--out`` (saved after every point): ``attention-kernel.parquet``,
``attention-tile.parquet``, ``attention-checks.json``. A failed check is recorded and the point's rows kept; the
exit status is 1 when any check failed.

    python benchmarks/gpu/attention_triton_sweep4.py --out $OUT/r/attention --points 57344:3:128,59392:3:64 \
        --repeats 3 --trials 8
"""

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def points(text: str) -> list:
    """[(M, heads, head_dim), ...] of "M:heads:d,..." (heads 3 and d 128 when left out)."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        parts = item.split(":")
        if len(parts) > 3 or not all(p.isdigit() for p in parts):
            raise SystemExit(f"--points: {item!r} must be M, M:heads or M:heads:head_dim")
        m, h, d = (parts + ["3", "128"][len(parts) - 1:])[:3]
        out.append((int(m), int(h), int(d)))
    return out


def order(pts: list, rep: int) -> list:
    """The points of repeat ``rep``: ``pts`` rotated left by ``rep``."""
    k = rep % len(pts)
    return pts[k:] + pts[:k]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--points", required=True, help="comma-separated M[:heads[:head_dim]] (3 heads, d 128 default)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trials", type=int, default=8)
    args = ap.parse_args(argv)
    pts = points(args.points)
    if args.repeats < 1:
        raise SystemExit(f"--repeats: {args.repeats} must be >= 1")
    import torch

    from attention_triton_heldout import measure
    from xstage.hw.attention.config import AttentionConfig
    from xstage.hw.common.timing import gpu_clocks
    from xstage.records.attention import save_run

    base = AttentionConfig(16384, 3, 128, 8, block_n=128, num_stages=3, tma=True, store_cache=".wt",
                           stagger=True, split_tail=True)
    cfgs = [replace(base, seq_len=M, heads=h, head_dim=d) for M, h, d in pts]   # validated before any launch
    props = torch.cuda.get_device_properties(0)
    dev = {"name": props.name, "L2_cache_size": int(getattr(props, "L2_cache_size", -1)),
           "sm_count": int(props.multi_processor_count)}
    print(f"device: {dev}; clocks (sm, mem, temp, power, reasons): {gpu_clocks()}", flush=True)
    t0 = time.time()
    rows, tiles, checks = [], [], []
    for rep in range(args.repeats):
        for cfg in order(cfgs, rep):
            r, t, c = measure(cfg, args.trials, seed=2 + rep)
            for x in r + c:
                x["rep"] = rep
            t = [f[f["sm"] % 2 == 0].assign(rep=rep, heads=cfg.heads, head_dim=cfg.head_dim) for f in t]
            rows, tiles, checks = rows + r, tiles + t, checks + c
            save_run(Path(args.out), rows, tiles, checks, {"args": vars(args), "kernel": base.label(), "device": dev,
                                                           "points": pts}, overwrite=True)
            fa = next(x for x in r if x["variant"] == "fa")["time(us)"]
            print(f"rep {rep} M={cfg.seq_len} H={cfg.heads} d={cfg.head_dim}: fa {fa:.0f} us, "
                  + ", ".join(f"{x['variant']} {x['paired_minus_fa(us)']:.0f}" for x in r if "paired_minus_fa(us)" in x)
                  + f" ({time.time() - t0:.0f}s)", flush=True)
    failed = [c for c in checks if c.get("ok") is False]
    print(f"checks: {len(checks)} rows, {len(failed)} failed; wall {time.time() - t0:.0f}s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
