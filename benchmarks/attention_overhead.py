"""Where the fused FlashAttention's residual comes from: the kernel's own cost versus the remote path.

For each fused option (how the finished tile is sent: at once, drip, stagger; split tail or not) and
each M, the matched-pair residual over FA-only (``attention_bench.paired_differences``: back-to-back
launches, alternating order, median over pairs) twice: with the W-1 remote destinations in
host-mapped memory (the PCIe X-Stage) and with every destination in device memory (no remote path;
what remains is the kernel's code). Also the compiled kernel's registers and spills. One H200:

    python3 benchmarks/attention_overhead.py --out $OUT/overhead [--seq-lens 32768,65536] [--pairs 30]

Prints one table row per (M, option) and writes ``overhead.json`` (rows + provenance) into --out.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from xstage.errors import InputError, exit_with
from xstage.hw.attention import kernel as A
from xstage.hw.attention import variants as B
from xstage.hw.common import timing as T
from xstage.provenance import provenance
from xstage.records import atomic_write_text

OPTIONS = {  # name: (store_cache, drip, split_tail, stagger, tail_parts); tail_parts 2 = halves, 0 = balanced
    "now": ("", False, False, False, 2), "now_split": ("", False, True, False, 2),
    "drip_split": ("", True, True, False, 2), "stagger_split": ("", False, True, True, 2),
    "stagger": ("", False, False, True, 2), "stagger_splitbal": ("", False, True, True, 0),
}
BASE = dict(block_n=128, num_stages=3, tma=True)  # the configuration the single-GPU tuning picks


def measure(M: int, heads: int, pairs: int) -> list:
    import torch

    rows = []
    for split in sorted({o[2::2] for o in OPTIONS.values()}):  # FA-only with each option's split tail as its baseline
        fa_cfg = A.AttentionConfig(M, heads, 128, 8, **BASE, split_tail=split[0], tail_parts=split[1])
        q, k, v = B.random_qkv(fa_cfg, 5)
        out = torch.empty_like(q)
        fa = lambda c=fa_cfg: A.launch_fa(q, k, v, c, out=out)  # noqa: E731
        fa()
        T.sync()
        fa_times, _ = T.time_variants({"fa": fa}, trials=15, warmup=3, rounds=3)
        fa_us = float(np.median(fa_times["fa"]))
        print(f"  M={M} FA-only {fa_cfg.label()}: {fa_us:.1f} us", file=sys.stderr)
        opts = {n: o for n, o in OPTIONS.items() if o[2::2] == split}
        for where in ("pcie", "hbm"):
            dests = (A.Destinations.emulated if where == "pcie" else A.Destinations.in_device_memory)(
                fa_cfg.layout, "cuda")
            cfgs = {n: B.fused_options(fa_cfg, o) for n, o in opts.items()}
            fns = {n: (lambda c=c: A.launch_fa(q, k, v, c, dest_table=dests.table)) for n, c in cfgs.items()}
            for fn in fns.values():
                fn()
            T.sync()
            diffs = T.paired_differences(fa, fns, pairs=pairs)
            for name, d in diffs.items():
                stats = A.compile_stats(cfgs[name], True)
                rows.append({"M": M, "option": name, "destinations": where, "paired_minus_fa(us)": float(np.median(d)),
                             "p25(us)": float(np.percentile(d, 25)), "p75(us)": float(np.percentile(d, 75)),
                             "pairs": len(d), "config": cfgs[name].label(), "fa_us": fa_us, **stats,
                             **{f"fa_{k}": v for k, v in A.compile_stats(fa_cfg, False).items()}})
                print(f"  M={M} {name:>14} {where}: {rows[-1]['paired_minus_fa(us)']:8.1f} us "
                      f"(p25 {rows[-1]['p25(us)']:.1f}, p75 {rows[-1]['p75(us)']:.1f}) regs {stats.get('n_regs')} "
                      f"spills {stats.get('n_spills')}", file=sys.stderr)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seq-lens", default="16384,32768,65536")
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--pairs", type=int, default=30)
    args = p.parse_args(argv)
    try:
        seq_lens = [int(m) for m in args.seq_lens.split(",")]
    except ValueError:
        raise InputError("--seq-lens", args.seq_lens, "must be comma-separated integers") from None
    import torch

    if not torch.cuda.is_available():
        raise InputError("device", "cpu", "needs a CUDA GPU")
    rows = [r for M in seq_lens for r in measure(M, args.heads, args.pairs)]
    print(f"{'M':>6} {'option':>14} {'pcie (us)':>10} {'hbm (us)':>10} {'regs':>5} {'fa regs':>7}")
    by = {(r["M"], r["option"], r["destinations"]): r for r in rows}
    for M, opt in sorted({(r["M"], r["option"]) for r in rows}):
        pc, hb = by[(M, opt, "pcie")], by[(M, opt, "hbm")]
        print(f"{M:>6} {opt:>14} {pc['paired_minus_fa(us)']:>10.1f} {hb['paired_minus_fa(us)']:>10.1f} "
              f"{str(hb.get('n_regs')):>5} {str(hb.get('fa_n_regs')):>7}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "overhead.json", json.dumps({"rows": rows, "provenance": provenance(with_gpu=True),
                                                          "args": vars(args)}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    exit_with(main, "attention_overhead")
