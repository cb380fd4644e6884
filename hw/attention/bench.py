"""GPU measurement of FlashAttention–A2A as in the paper's §5.3 (one H200, W ranks emulated).

Correctness first (fresh random inputs against float32 SDPA, destinations poisoned before and
checked after every run), then for each M: FA-only, Serial, X-Stage-Fused, SDPA (cuDNN, flash),
Serial-best (best SDPA + copy-engine copies), A2A-only, CE-only; each captured in a CUDA graph and
timed with events around replays (sender-side boundary), rounds in rotated order, median of all
trials after warm-up; SM clocks read with nvidia-smi before and after each M. The instrumented
fused and FA-only kernels run once more to fill the tile records.

    python3 -m xstage.hw.attention.bench --out $OUT/attention      # the whole GPU run (flags: xstage.cli.bench_attention)

The parts: ``variants.py`` (what is timed, by name), ``checks.py``, ``tune.py``; the timing harness is
``xstage.hw.common.timing``; the records ``xstage.records.attention``.
"""


import json
import time
import traceback
from dataclasses import replace
from pathlib import Path

import numpy as np

from xstage.hw.attention.checks import CHECK_SHAPES, DRY_RUN_SHAPES, run_checks
from xstage.hw.attention.config import FUSED_FIELDS, AttentionConfig
from xstage.hw.attention.tune import pick_fused, tune
from xstage.hw.attention.variants import kernel_variants, random_qkv, reference, sdpa_backends
from xstage.hw.common.timing import device, gpu_clocks, paired_differences, sync, time_variants
from xstage.records import atomic_write_text
from xstage.records.attention import alias_best_backend, kernel_row, save_run, tile_frame
from xstage.hw.common.log import hw_log


def measure(cfg, trials: int = 25, seed: int = 2, warmup: int = 5, rounds: int = 5) -> tuple:
    """Kernel rows (all variants), tile frames and correctness rows for one configuration."""
    import torch

    from xstage.hw.attention import kernel as A

    q, k, v = random_qkv(cfg, seed)
    ref = reference(q, k, v)
    dests = A.Destinations.emulated(cfg.layout, device())
    out = torch.empty_like(q)
    checks = []
    sdpa_out = {}
    for backend in sdpa_backends():
        try:
            sdpa_out[backend] = A.sdpa(q, k, v, backend)
            sync()
            checks.append({"config": cfg.label(), "variant": f"sdpa_{backend}", **A.compare(sdpa_out[backend], ref)})
        except RuntimeError as err:
            hw_log(f"  sdpa {backend} unavailable: {str(err)[:120]}")
    fns, variant_cfg = kernel_variants(cfg, q, k, v, out, dests.table)
    for backend, o in sdpa_out.items():
        fns[f"sdpa_{backend}"] = lambda b=backend: A.sdpa(q, k, v, b)
        fns[f"serial_best_{backend}"] = lambda b=backend: A.ce_transfer(A.sdpa(q, k, v, b), dests)
        fns[f"ce_{backend}"] = lambda o=o: A.ce_transfer(o, dests)
    log = torch.zeros((cfg.layout.num_tiles, 8), dtype=torch.int64, device=device())
    instrument = device() == "cuda"
    if instrument:
        fns["fused_instr"] = lambda: A.launch_fa(q, k, v, cfg, dest_table=dests.table, tile_log=log)
    hbm = A.Destinations.in_device_memory(cfg.layout, device())  # diagnostic: the same kernel, no PCIe stores
    fns["fused_hbm"] = lambda: A.launch_fa(q, k, v, cfg, dest_table=hbm.table)
    for variant in ["fa", "serial"] + [v for v in fns if v.startswith("fused")]:  # correctness of what is timed
        d = hbm if variant == "fused_hbm" else dests
        d.poison()
        out.fill_(float("nan"))
        fns[variant]()
        sync()
        res = A.compare(out, ref) if variant == "fa" else d.check(ref)
        checks.append({"config": variant_cfg.get(variant, cfg).label(), "variant": variant, **res})
    clocks_before = gpu_clocks()
    times, modes = time_variants(fns, trials=trials, warmup=warmup, rounds=rounds)
    paired = paired_differences(fns["fa"], {name: fn for name, fn in fns.items()
                                            if name.startswith("fused") or name == "serial"}, pairs=max(trials, 10))
    clocks_after = gpu_clocks()
    extra = {"clocks_before": clocks_before, "clocks_after": clocks_after}
    rows = []
    for name, t in times.items():
        c = variant_cfg.get(name, cfg)
        pair = {"paired_minus_fa(us)": float(np.median(paired[name])), "pairs": len(paired[name])} if name in paired else {}
        rows.append(kernel_row(c, name, t, timing=modes[name], **{f: getattr(c, f) for f in FUSED_FIELDS}, **pair,
                               **extra))
    rows += alias_best_backend(rows, sdpa_backends(), ("sdpa", "serial_best", "ce"))  # the user's pick
    tiles = []
    runs = [(name, c, {"dest_table": dests.table}) for name, c in variant_cfg.items() if name.startswith("fused")]
    for schedule, c, kwargs in runs + [("fa", cfg, {"out": out})] if instrument else ():
        log.zero_()
        A.launch_fa(q, k, v, c, tile_log=log, **kwargs)
        sync()
        tiles.append(tile_frame(c, log.cpu().numpy(), schedule=schedule))
    return rows, tiles, checks


def run(args) -> dict:
    """The whole GPU run of ``args`` (``xstage.cli.bench_attention`` parses and checks them): checks, tuning,
    every M timed; the records are saved after every M. Returns {"rows", "checks", "failed", "paths"}."""
    t_start = time.time()
    out_dir = Path(args.out)
    if device() == "cuda":
        from xstage.hw.common.hostmap import check_mapping

        hw_log("host mapping:", check_mapping())
        hw_log("clocks (sm, mem, temp, power, reasons):", gpu_clocks())
    shapes = DRY_RUN_SHAPES if args.dry_run else CHECK_SHAPES
    try:
        checks = [] if args.no_checks else run_checks(shapes)
    except Exception as err:  # noqa: BLE001 - report, then still measure
        traceback.print_exc()
        checks = [{"variant": "checks", "ok": False, "error": f"{type(err).__name__}: {err}"}]
    failed = [c for c in checks if c.get("ok") is False]
    if args.dry_run:
        cfg, tune_rows = AttentionConfig(256, args.heads, args.head_dim, args.world_size, block_m=16,
                                         block_n=16, num_warps=4, num_stages=2), []
    elif args.no_tune:
        cfg, tune_rows = AttentionConfig(16384, args.heads, args.head_dim, args.world_size), []
    else:
        cfg, tune_rows = tune(heads=args.heads, head_dim=args.head_dim, world=args.world_size)
        cfg, store_rows = pick_fused(cfg)
        tune_rows += store_rows
    hw_log(f"  kernel config: {cfg.label()} ({time.time() - t_start:.0f}s)")
    rows, tiles, paths = list(tune_rows), [], []
    meta = {"args": vars(args), "kernel": cfg.label()}
    for M in (int(m) for m in args.seq_lens.split(",")):
        try:
            r, t, c = measure(replace(cfg, seq_len=M), trials=args.trials,
                              **({"warmup": 0, "rounds": 1} if args.dry_run else {}))
        except Exception as err:  # noqa: BLE001 - keep the other sequence lengths' results
            traceback.print_exc()
            failed.append({"variant": "measure", "M": M, "ok": False, "error": f"{type(err).__name__}: {err}"})
            checks.append(failed[-1])
            continue
        rows += r
        tiles += t
        checks += c
        failed += [x for x in c if x.get("ok") is False]
        # saved after every M, so that a run stopped by its time limit keeps what it measured
        paths = save_run(out_dir, rows, tiles, checks, meta, overwrite=True)
        hw_log(f"  M={M}: done ({time.time() - t_start:.0f}s)")
    if not [r for r in rows if not r["variant"].endswith("_tune")]:
        paths = [atomic_write_text(out_dir / "attention-checks.json", json.dumps(checks, indent=1, default=str),
                                   overwrite=True)]
    return {"rows": rows, "checks": checks, "failed": failed, "paths": paths, "wall_s": time.time() - t_start}


if __name__ == "__main__":  # the flags: xstage.cli.bench_attention
    from xstage.cli.bench_attention import NAME, main
    from xstage.errors import exit_with

    exit_with(main, NAME)
