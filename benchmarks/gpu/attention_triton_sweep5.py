"""The Triton FA-A2A variants over (M, heads, head dim, block_n) points, repeated and interleaved (issue 15 item 5).

``attention_triton_heldout.measure`` (same kernels, checks: float32 reference, poisoned destinations; paired
residuals and instrumented launches) over (M, heads, head dim, block_n) points, each measured ``--repeats`` times
with fresh random inputs (seed 2 + repeat). The repeats are interleaved: repeat r runs every point, in the point
order rotated by r, before repeat r + 1 starts, so a drift of the machine over the call (clock, temperature) falls
on every point alike and the spread over repeats measures the run-to-run variation. Head dim 64 halves one head's
K/V bytes (2 x M x d x 2) at the same M and Q-loop length, which separates the L2 (K/V bytes per head) from M (the
eleventh FA rule). Halving block_n at one M doubles the K/V steps per Q tile (M // block_n) and leaves the tile grid
(heads x M / block_m), one head's K/V bytes and the FLOPs as they are, which separates the steps from M (the twelfth
rule). Every row and tile carries ``rep``; tiles ``heads``, ``head_dim`` and ``block_n``; the device's L2 size and
SM count go in the run's meta; tile logs are kept for programs on even SMs and for the first ``--tile-reps``
repeats only. Records under ``--out`` (saved after every point): ``attention-kernel.parquet``,
``attention-tile.parquet``, ``attention-checks.json``, and with ``--paired-marks`` ``paired-marks.json``: the host's
wall-clock start and end of every variant's paired timing (rep, M, heads, head dim, block_n, variant; the host's UTC
offset beside), to be read against a clock trace taken beside (``nvidia-smi -lms``). A failed check is recorded and
the point's rows kept; the exit status is 1 when any check failed.

    python benchmarks/gpu/attention_triton_sweep5.py --out $OUT/r/attention --points 32768:3:128:64,30720:3:64:128 \
        --repeats 3 --trials 8

The eleventh rule's run (``data/attention-runs/ad8f0af-heldout4``) was made by ``attention_triton_sweep4.py``
(this script without block_n; removed since, in git history at ad8f0af). Its recorded command run here, the points
without block_n (128), measures the same configurations in the same order with the same seeds
(``tests/sim/test_attention_sweep5_cli.py``); the records then also carry a ``block_n`` tile column and
``tile_reps`` and block_n in the meta, and keep repeat 0's tile logs, as the committed ones do (sweep4 kept every
repeat's: ``--tile-reps 3``).
"""

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def points(text: str) -> list:
    """[(M, heads, head_dim, block_n), ...] of "M[:heads[:d[:block_n]]],..." (3 heads, d 128, block_n 128 when left
    out); block_n a power of two >= 16."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        parts = item.split(":")
        if len(parts) > 4 or not all(p.isdigit() for p in parts):
            raise SystemExit(f"--points: {item!r} must be M, M:heads, M:heads:head_dim or M:heads:head_dim:block_n")
        m, h, d, bn = (int(x) for x in (parts + ["3", "128", "128"][len(parts) - 1:])[:4])
        if bn < 16 or bn & (bn - 1):
            raise SystemExit(f"--points: block_n {bn} in {item!r} must be a power of two >= 16")
        out.append((m, h, d, bn))
    return out


def order(pts: list, rep: int) -> list:
    """The points of repeat ``rep``: ``pts`` rotated left by ``rep``."""
    k = rep % len(pts)
    return pts[k:] + pts[:k]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--points", required=True, help="comma-separated M[:heads[:head_dim[:block_n]]]")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--tile-reps", type=int, default=1, help="keep tile logs of the first N repeats")
    ap.add_argument("--paired-marks", action="store_true",
                    help="also write paired-marks.json: each variant's paired timing's host start and end")
    args = ap.parse_args(argv)
    pts = points(args.points)
    if args.repeats < 1:
        raise SystemExit(f"--repeats: {args.repeats} must be >= 1")
    import torch

    from attention_triton_heldout import measure
    from xstage.hw.attention.config import AttentionConfig
    from xstage.hw.common.timing import gpu_clocks
    from xstage.records import atomic_write_text
    from xstage.records.attention import save_run

    base = AttentionConfig(16384, 3, 128, 8, block_n=128, num_stages=3, tma=True, store_cache=".wt",
                           stagger=True, split_tail=True)
    cfgs = [replace(base, seq_len=M, heads=h, head_dim=d, block_n=bn) for M, h, d, bn in pts]   # validated first
    props = torch.cuda.get_device_properties(0)
    dev = {"name": props.name, "L2_cache_size": int(getattr(props, "L2_cache_size", -1)),
           "sm_count": int(props.multi_processor_count)}
    print(f"device: {dev}; clocks (sm, mem, temp, power, reasons): {gpu_clocks()}", flush=True)
    t0 = time.time()
    rows, tiles, checks, marks = [], [], [], []
    for rep in range(args.repeats):
        for cfg in order(cfgs, rep):
            if args.paired_marks:
                m = []
                r, t, c = measure(cfg, args.trials, seed=2 + rep, marks=m)
                marks += [dict(x, rep=rep, M=cfg.seq_len, heads=cfg.heads, head_dim=cfg.head_dim, block_n=cfg.block_n)
                          for x in m]
                atomic_write_text(Path(args.out) / "paired-marks.json", json.dumps(
                    {"what": "host wall-clock (time.time(), s) start and end of each variant's paired timing",
                     "utc_offset_s": time.localtime().tm_gmtoff, "marks": marks}, indent=0), overwrite=True)
            else:
                r, t, c = measure(cfg, args.trials, seed=2 + rep)
            for x in r + c:
                x["rep"] = rep
            if rep < args.tile_reps:
                tiles += [f[f["sm"] % 2 == 0].assign(rep=rep, heads=cfg.heads, head_dim=cfg.head_dim,
                                                     block_n=cfg.block_n) for f in t]
            rows, checks = rows + r, checks + c
            save_run(Path(args.out), rows, tiles, checks, {"args": vars(args), "kernel": base.label(), "device": dev,
                                                           "points": pts}, overwrite=True)
            fa = next(x for x in r if x["variant"] == "fa")["time(us)"]
            print(f"rep {rep} M={cfg.seq_len} H={cfg.heads} d={cfg.head_dim} bn={cfg.block_n}: fa {fa:.0f} us, "
                  + ", ".join(f"{x['variant']} {x['paired_minus_fa(us)']:.0f}" for x in r if "paired_minus_fa(us)" in x)
                  + f" ({time.time() - t0:.0f}s)", flush=True)
    failed = [c for c in checks if c.get("ok") is False]
    print(f"checks: {len(checks)} rows, {len(failed)} failed; wall {time.time() - t0:.0f}s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
