"""The Triton FA-A2A kernel's tile-end and staggered variants at new M, lean (issue 15 item 5, the eighth FA rule).

The same kernels, configuration and timing harness as ``xstage.hw.attention.bench`` (``data/attention``'s run:
bm 128, bn 128, 8 warps, 3 stages, TMA loads, the chosen fused send ``.wt`` + stagger + split tail), but only
the variants the eighth rule predicts -- FA-only, ``fused_wb``, ``fused_wb_split``, ``fused_wb_stagger``,
``fused_wb_split_stagger`` -- and ``fused_hbm`` (the chosen kernel into local HBM), no SDPA / Serial baselines and
no tuning, so that three M fit a short device call. Correctness first (fresh random inputs against the float32
reference, destinations poisoned before every checked run); paired residuals against FA-only; one instrumented
launch per variant for the tile records. Records: ``attention-kernel.parquet``, ``attention-tile.parquet``,
``attention-checks.json`` under ``--out`` (saved after every M).

    python benchmarks/gpu/attention_triton_heldout.py --out $OUT/attention --seq-lens 20480,40960,57344 --trials 8
"""

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

KEEP = ("fa", "fused_wb", "fused_wb_split", "fused_wb_stagger", "fused_wb_split_stagger")


def measure(cfg, trials: int, seed: int = 2, marks: list | None = None) -> tuple:
    """Checks, timed rows, paired residuals and one instrumented launch per variant of ``cfg``; ``marks``, when a list,
    gets the host's wall-clock start and end of each variant's paired timing (``timing.paired_differences``)."""
    import torch

    from xstage.hw.attention import kernel as A
    from xstage.hw.attention.variants import kernel_variants, random_qkv, reference
    from xstage.hw.common.timing import device, gpu_clocks, paired_differences, sync, time_variants
    from xstage.hw.attention.config import FUSED_FIELDS
    from xstage.records.attention import kernel_row, tile_frame

    q, k, v = random_qkv(cfg, seed)
    ref = reference(q, k, v)
    dests = A.Destinations.emulated(cfg.layout, device())
    out = torch.empty_like(q)
    fns, variant_cfg = kernel_variants(cfg, q, k, v, out, dests.table)
    fns = {n: f for n, f in fns.items() if n in KEEP}
    missing = [n for n in KEEP if n not in fns]
    if missing:
        raise RuntimeError(f"variants missing from kernel_variants: {missing}")
    hbm = A.Destinations.in_device_memory(cfg.layout, device())
    fns["fused_hbm"] = lambda: A.launch_fa(q, k, v, cfg, dest_table=hbm.table)
    checks = []
    for variant in fns:
        d = hbm if variant == "fused_hbm" else dests
        d.poison()
        out.fill_(float("nan"))
        fns[variant]()
        sync()
        res = A.compare(out, ref) if variant == "fa" else d.check(ref)
        checks.append({"config": variant_cfg.get(variant, cfg).label(), "variant": variant, **res})
    before = gpu_clocks()
    times, modes = time_variants(fns, trials=trials, warmup=3, rounds=2)
    paired = paired_differences(fns["fa"], {n: f for n, f in fns.items() if n != "fa"}, pairs=max(trials, 10),
                                marks=marks)
    extra = {"clocks_before": before, "clocks_after": gpu_clocks()}
    rows = []
    for name, t in times.items():
        c = variant_cfg.get(name, cfg)
        pair = {"paired_minus_fa(us)": float(np.median(paired[name])), "pairs": len(paired[name])} if name in paired else {}
        rows.append(kernel_row(c, name, t, timing=modes[name], **{f: getattr(c, f) for f in FUSED_FIELDS}, **pair, **extra))
    log = torch.zeros((cfg.layout.num_tiles, 8), dtype=torch.int64, device=device())
    tiles = []
    for name in KEEP:
        c = variant_cfg[name]
        log.zero_()
        A.launch_fa(q, k, v, c, tile_log=log, **({"out": out} if name == "fa" else {"dest_table": dests.table}))
        sync()
        tiles.append(tile_frame(c, log.cpu().numpy(), schedule=name))
    return rows, tiles, checks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq-lens", default="20480,40960,57344")
    ap.add_argument("--trials", type=int, default=8)
    args = ap.parse_args(argv)
    from xstage.hw.attention.config import AttentionConfig
    from xstage.hw.common.log import hw_log
    from xstage.hw.common.timing import gpu_clocks
    from xstage.records.attention import save_run

    t0 = time.time()
    base = AttentionConfig(16384, 3, 128, 8, block_n=128, num_stages=3, tma=True, store_cache=".wt",
                           stagger=True, split_tail=True)
    hw_log("clocks (sm, mem, temp, power, reasons):", gpu_clocks())
    hw_log(f"  kernel config: {base.label()}")
    rows, tiles, checks = [], [], []
    for M in (int(m) for m in args.seq_lens.split(",")):
        r, t, c = measure(replace(base, seq_len=M), args.trials)
        rows, tiles, checks = rows + r, tiles + t, checks + c
        save_run(Path(args.out), rows, tiles, checks, {"args": vars(args), "kernel": base.label()}, overwrite=True)
        fa = next(x for x in r if x["variant"] == "fa")["time(us)"]
        hw_log(f"  M={M}: fa {fa:.0f} us, " + ", ".join(f"{x['variant']} {x['paired_minus_fa(us)']:.0f}" for x in r
                                                       if "paired_minus_fa(us)" in x) + f" ({time.time() - t0:.0f}s)")
    failed = [c for c in checks if c.get("ok") is False]
    hw_log(f"checks: {len(checks)} rows, {len(failed)} failed; wall {time.time() - t0:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
