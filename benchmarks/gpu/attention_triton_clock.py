"""Why the split tile-end Triton kernel's residual falls at large M: clocks, idle gaps and the non-split build (issue 15
item 5, the ninth FA rule's diagnostics; post hoc, fits nothing that was pre-registered).

Three protocols per M, on the configuration of ``attention_triton_heldout.py`` (bm 128, bn 128, 3 stages, TMA):

- blocks: each of FA-only, FA-only built without the split tail (``fa_nosplit``), ``fused_wb_split`` and
  ``fused_wb`` replayed back to back ``--block`` times (CUDA graphs), twice in turn, with the host's wall-clock start
  and end of every block: a ``nvidia-smi -lms`` trace taken beside (by the caller) gives each block's SM clock and
  power, so whether a kernel that stalls runs at a higher clock under the power cap than FA-only can be read;
- gapped pairs: FA-only and each fused kernel launched alone after ``--gap-ms`` of idle GPU, in pairs (order
  alternating): the residual when no power cap holds the clock, beside the back-to-back residual of the main run;
- tile logs: one instrumented launch of each of the four after the same idle gap (``attention-tile.parquet``).

Correctness first: ``fa_nosplit``'s output is compared with the float32 reference (the same check as the bench's).
Records under ``--out``: ``clock-diag.json`` (every launch's time, the blocks' host times, provenance) and
``attention-tile.parquet``.

    python benchmarks/gpu/attention_triton_clock.py --out $OUT/clock --seq-lens 36864,53248,61440
    python benchmarks/gpu/attention_triton_clock.py --out $OUT/clock --points 49152,65536:3:64 --pairs 12

``--points M[:heads[:head_dim]]`` (3 heads, head dim 128 left out) replaces ``--seq-lens`` where given; every run
entry of the record carries its heads and head dim.
"""

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

FUSED = ("fused_wb_split", "fused_wb")


def events_time(fn, n: int) -> list:
    import torch

    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) * 1e3 for a, b in ev]


def measure(cfg, block: int, gap_s: float, pairs: int, seed: int = 3) -> tuple:
    import torch

    from xstage.hw.attention import kernel as A
    from xstage.hw.attention.variants import kernel_variants, random_qkv, reference
    from xstage.hw.common.timing import capture, sync
    from xstage.records.attention import tile_frame

    q, k, v = random_qkv(cfg, seed)
    dests = A.Destinations.emulated(cfg.layout, "cuda")
    out = torch.empty_like(q)
    fns, variant_cfg = kernel_variants(cfg, q, k, v, out, dests.table)
    nosplit = replace(cfg, split_tail=False)
    out2 = torch.empty_like(q)
    fns = {"fa": fns["fa"], "fa_nosplit": lambda: A.launch_fa(q, k, v, nosplit, out=out2), **{n: fns[n] for n in FUSED}}
    variant_cfg = {"fa": cfg, "fa_nosplit": nosplit, **{n: variant_cfg[n] for n in FUSED}}
    out2.fill_(float("nan"))
    fns["fa_nosplit"]()
    sync()
    check = {"variant": "fa_nosplit", "config": nosplit.label(), **A.compare(out2, reference(q, k, v))}
    replays = {}
    for name, fn in fns.items():
        for _ in range(3):
            fn()
        replays[name] = capture(fn)[0]
    sync()
    blocks = []
    for rep in range(2):
        for name, rp in replays.items():
            torch.cuda._sleep(5_000_000)
            t0 = time.time()
            us = events_time(rp, block)
            blocks.append({"variant": name, "rep": rep, "host_start_s": t0, "host_end_s": time.time(), "us": us})
    gapped = {}
    for name in FUSED:
        diffs = []
        for i in range(pairs):
            order = ("fa", name) if i % 2 == 0 else (name, "fa")
            t = {}
            for n in order:
                time.sleep(gap_s)
                t[n] = events_time(replays[n], 1)[0]
            diffs.append({"fa_us": t["fa"], "fused_us": t[name], "diff_us": t[name] - t["fa"], "fa_first": i % 2 == 0})
        gapped[name] = diffs
    tiles = []
    log = torch.zeros((cfg.layout.num_tiles, 8), dtype=torch.int64, device="cuda")
    for name in fns:
        c = variant_cfg[name]
        log.zero_()
        time.sleep(gap_s)
        A.launch_fa(q, k, v, c, tile_log=log, **({"out": out} if name.startswith("fa") else {"dest_table": dests.table}))
        sync()
        tiles.append(tile_frame(c, log.cpu().numpy(), schedule=name))
    return {"M": cfg.seq_len, "heads": cfg.heads, "head_dim": cfg.head_dim, "check": check, "blocks": blocks,
            "gapped": gapped}, tiles


def points(args) -> list:
    """[(M, heads, head_dim)] of ``--points`` "M[:heads[:head_dim]],..." (3 heads, d 128 left out), else of
    ``--seq-lens`` at 3 heads, d 128."""
    if not args.points:
        return [(int(m), 3, 128) for m in args.seq_lens.split(",") if m.strip()]
    out = []
    for item in (x.strip() for x in args.points.split(",") if x.strip()):
        parts = item.split(":")
        if len(parts) > 3 or not all(p.isdigit() for p in parts):
            raise SystemExit(f"--points: {item!r} must be M, M:heads or M:heads:head_dim")
        out.append(tuple(int(x) for x in (parts + ["3", "128"][len(parts) - 1:])[:3]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq-lens", default="36864,53248,61440")
    ap.add_argument("--points", default=None, help="comma-separated M[:heads[:head_dim]] (replaces --seq-lens)")
    ap.add_argument("--block", type=int, default=12)
    ap.add_argument("--gap-ms", type=float, default=150.0)
    ap.add_argument("--pairs", type=int, default=8)
    args = ap.parse_args(argv)
    import pandas as pd

    from xstage.hw.attention.config import AttentionConfig
    from xstage.hw.common.timing import gpu_clocks
    from xstage.provenance import provenance
    from xstage.records import atomic_write_text

    base = AttentionConfig(16384, 3, 128, 8, block_n=128, num_stages=3, tma=True, store_cache=".wt",
                           stagger=True, split_tail=True)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    pts = points(args)
    cfgs = [replace(base, seq_len=M, heads=h, head_dim=d) for M, h, d in pts]       # validated first
    runs, tiles, t0 = [], [], time.time()
    for (M, h, d), cfg in zip(pts, cfgs):
        r, t = measure(cfg, args.block, args.gap_ms / 1e3, args.pairs)
        runs.append(r)
        tiles += t
        med = {b["variant"]: float(np.median(b["us"])) for b in r["blocks"] if b["rep"] == 1}
        gap = {n: float(np.median([d["diff_us"] for d in r["gapped"][n]])) for n in FUSED}
        print(f"M={M} H={h} d={d}: check {r['check']['ok']}; blocks (rep 1) "
              + ", ".join(f"{k} {v:.0f}" for k, v in med.items())
              + "; gapped residual " + ", ".join(f"{k} {v:.0f}" for k, v in gap.items()) + f" ({time.time() - t0:.0f}s)",
              flush=True)
        record = {"what": "Triton FA-A2A clock diagnostics: back-to-back blocks, gapped pairs, idle-gap tile logs",
                  "args": vars(args), "kernel": base.label(), "clocks_end": gpu_clocks(), "runs": runs,
                  "provenance": provenance(with_gpu=True)}
        atomic_write_text(outdir / "clock-diag.json", json.dumps(record, indent=1, default=str), overwrite=True)  # after every M
        pd.concat(tiles).to_parquet(outdir / "attention-tile.parquet")
    failed = [r for r in runs if r["check"].get("ok") is False]
    print(f"checks: {len(runs)}, {len(failed)} failed; wall {time.time() - t0:.0f}s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
