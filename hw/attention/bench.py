"""GPU measurement of FlashAttention–A2A as in the paper's §5.3 (one H200, W ranks emulated).

Correctness first (fresh random inputs against float32 SDPA, destinations poisoned before and
checked after every run), then for each M: FA-only, Serial, X-Stage-Fused, SDPA (cuDNN, flash),
Serial-best (best SDPA + copy-engine copies), A2A-only, CE-only; each captured in a CUDA graph and
timed with events around replays (sender-side boundary), rounds in rotated order, median of all
trials after warm-up; SM clocks read with nvidia-smi before and after each M. The instrumented
fused and FA-only kernels run once more to fill the tile records.

    python3 -m xstage.hw.attention.bench --out $OUT/attention      # the whole GPU run
"""

import json
import subprocess
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

import numpy as np

from xstage.errors import InputError, exit_with
from xstage.hw.attention import kernel as A
from xstage.hw.attention.config import FUSED_FIELDS
from xstage.compare.attention_records import alias_best_backend, kernel_row, save_run, summary_table, tile_frame
from xstage.records import atomic_write_text

SDPA_BACKENDS = ("cudnn", "flash")
TUNE_CANDIDATES = (  # (block_n, num_stages, tma, num_warps, programs per SM) for d = 128, block_m = 128
    (64, 3, False, 8, 1), (128, 2, False, 8, 1), (64, 3, True, 8, 1), (128, 2, True, 8, 1), (64, 4, True, 8, 1),
    (128, 3, True, 8, 1), (32, 3, True, 4, 2))
STORE_CACHES = (".wt", "", ".cs")  # write-through, default (write-back), streaming
# (store cache, drip, split_tail, stagger, tail_parts): tail_parts 2 = halves. The balanced split (tail_parts=0,
# 11 parts on 132 SMs) measured 1038 vs 793 us FA-only at 16K (each merge on the last-arriving part's program
# makes it the last arriver of its next tile too): benchmarks/attention_overhead.py keeps timing it.
FUSED_OPTIONS = (
    ("", False, False, False, 2), (".wt", False, False, False, 2), ("", False, True, False, 2),
    ("", True, True, False, 2), ("", False, False, True, 2), ("", False, True, True, 2), (".wt", False, True, True, 2))
SMI_FIELDS = "clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active"


def gpu_clocks() -> str:
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unavailable"


def device() -> str:
    """"cuda", or "cpu" under the Triton interpreter (a dry run of this module at tiny sizes)."""
    import torch

    return "cpu" if A.interpreting() or not torch.cuda.is_available() else "cuda"


def _sync() -> None:
    import torch

    if device() == "cuda":
        torch.cuda.synchronize()


def store_tag(store_cache: str) -> str:
    """Variant suffix of a store cache operator: "" → "_wb", ".wt" → "_wt", ".cs" → "_cs"."""
    return "_" + (store_cache.lstrip(".") or "wb")


def fused_tag(store_cache: str, drip: bool, split_tail: bool = False, stagger: bool = False, tail_parts: int = 2) -> str:
    split = ("_split" + {2: "", 0: "bal"}.get(tail_parts, str(tail_parts))) if split_tail else ""
    return store_tag(store_cache) + ("_drip" if drip else "") + split + ("_stagger" if stagger else "")


def fused_choice(cfg) -> tuple:
    """The ``FUSED_OPTIONS`` tuple that ``cfg`` has."""
    return tuple(getattr(cfg, f) for f in FUSED_FIELDS)


def fused_options(cfg, opt: tuple):
    """``cfg`` with one ``FUSED_OPTIONS`` tuple applied."""
    return replace(cfg, **dict(zip(FUSED_FIELDS, opt, strict=True)))


def sdpa_backends() -> tuple:
    """The SDPA backends timed as baselines (none in a CPU dry run: the transfer needs a GPU)."""
    return SDPA_BACKENDS if device() == "cuda" else ()


def random_qkv(cfg, seed: int):
    import torch

    gen = torch.Generator(device=device()).manual_seed(seed)
    shape = (cfg.seq_len, cfg.heads, cfg.head_dim)
    return [torch.randn(shape, device=device(), generator=gen).to(torch.bfloat16) for _ in range(3)]


def reference(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        return A.reference_attention(q, k, v)


def capture(fn, capture_error_mode: str = "global"):
    """Return a replay callable: a CUDA graph of ``fn`` (eager ``fn`` if capture fails) and the mode.

    ``capture_error_mode`` as ``torch.cuda.graph``'s ("thread_local" where other threads, e.g. NCCL's
    watchdog, make CUDA calls during the capture)."""
    import torch

    if device() == "cpu":
        return fn, "eager"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode=capture_error_mode):
            fn()
        _sync()
        return graph.replay, "graph"
    except Exception as err:  # noqa: BLE001 - any capture failure falls back to eager timing
        _sync()
        print(f"  graph capture failed ({type(err).__name__}: {err}); timing eagerly", file=sys.stderr)
        return fn, "eager"


def time_variants(fns: dict, trials: int = 25, warmup: int = 5, rounds: int = 5, *, capture_fn=capture,
                  barrier=None) -> tuple:
    """Per-trial device times (us) of every variant: {name: [us]}, {name: "graph" | "eager"}.

    ``capture_fn(fn) -> (replay, mode)``; ``barrier()``, when given, runs on the host before each
    variant's warm-up and before each round's trials of a variant, outside the timed window (W ranks)."""
    import torch

    barrier = barrier or (lambda: None)
    replays, modes = {}, {}
    for name, fn in fns.items():
        barrier()
        for _ in range(warmup):
            fn()
        _sync()
        replays[name], modes[name] = capture_fn(fn)
        for _ in range(2):
            replays[name]()
    _sync()
    names = list(replays)
    per_round = -(-trials // rounds)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if device() == "cpu":  # dry run: host clock
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    replays[name]()
                    times[name].append((time.perf_counter() - t0) * 1e6)
                continue
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(per_round)]
            barrier()
            torch.cuda._sleep(20_000_000)  # keep the GPU busy while the host queues the trials
            for start, end in events:
                start.record()
                replays[name]()
                end.record()
            _sync()
            times[name] += [start.elapsed_time(end) * 1e3 for start, end in events]
    return times, modes


def paired_differences(base, others: dict, pairs: int = 30, *, capture_fn=capture) -> dict:
    """{name: [us]}: per pair, the device time of ``others[name]`` minus that of ``base``, the two
    launched back to back (which one goes first alternates). Slow clock drift (DVFS, temperature)
    moves both launches of a pair alike, so it cancels in the difference — the paper's matched-path
    comparison; a difference of two medians taken seconds apart does not cancel it."""
    import torch

    replays = {name: capture_fn(fn)[0] for name, fn in {"__base__": base, **others}.items()}
    diffs = {name: [] for name in others}
    if device() == "cpu":
        return {name: [0.0] for name in others}
    for name in others:
        events = [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in range(pairs)]
        torch.cuda._sleep(20_000_000)  # keep the GPU busy while the host queues the pairs
        for i, ev in enumerate(events):
            first, second = (replays["__base__"], replays[name]) if i % 2 == 0 else (replays[name], replays["__base__"])
            ev[0].record()
            first()
            ev[1].record()
            second()
            ev[2].record()
        _sync()
        for i, ev in enumerate(events):
            t_first, t_second = ev[0].elapsed_time(ev[1]) * 1e3, ev[1].elapsed_time(ev[2]) * 1e3
            diffs[name].append(t_second - t_first if i % 2 == 0 else t_first - t_second)
    return diffs


def check_shape(cfg, seed: int = 0, instrument: bool = True) -> list:
    """Every variant once on fresh inputs against float32 SDPA; destinations poisoned first."""
    import torch

    q, k, v = random_qkv(cfg, seed)
    ref = reference(q, k, v)
    dests = A.Destinations.emulated(cfg.layout, device())
    out = torch.empty_like(q)
    results = []
    instrument = instrument and device() == "cuda"  # the interpreter cannot run inline asm

    def record(variant, res):
        results.append({"config": cfg.label(), "rank": cfg.rank, "variant": variant,
                        **{k: v for k, v in res.items()}})

    out.fill_(float("nan"))
    A.launch_fa(q, k, v, cfg, out=out)
    _sync()
    record("fa", A.compare(out, ref))
    runs = {"fused": lambda: A.launch_fa(q, k, v, cfg, dest_table=dests.table),
            "serial": lambda: A.launch_a2a(A.launch_fa(q, k, v, cfg, out=out), dests.table, cfg)}
    for backend in sdpa_backends():
        runs[f"serial_best_{backend}"] = lambda b=backend: A.ce_transfer(A.sdpa(q, k, v, b), dests)
    log = torch.zeros((cfg.layout.num_tiles, 8), dtype=torch.int64, device=device())
    if instrument:
        runs["fused_instr"] = lambda: A.launch_fa(q, k, v, cfg, dest_table=dests.table, tile_log=log)
    for variant, run in runs.items():
        dests.poison()
        _sync()
        try:
            run()
            _sync()
        except RuntimeError as err:
            if variant.startswith("serial_best"):
                results.append({"config": cfg.label(), "variant": variant, "ok": None, "skipped": str(err)[:200]})
                continue
            raise
        record(variant, dests.check(ref))
    if instrument:
        t = log.cpu()
        ordered = bool(((t[:, 3] > 0) & (t[:, 3] <= t[:, 4]) & (t[:, 4] <= t[:, 5]) & (t[:, 5] <= t[:, 6])).all())
        results.append({"config": cfg.label(), "variant": "tile_log", "ok": ordered})
    return results


CHECK_SHAPES = (  # (M, H, d, W, rank, block_m, block_n, num_stages, tma)
    (1024, 2, 64, 8, 0, 128, 64, 3, False), (2048, 3, 128, 8, 3, 128, 64, 3, False),
    (4096, 1, 128, 4, 1, 128, 128, 2, False), (1024, 4, 64, 2, 1, 64, 32, 2, False),
    (8192, 3, 128, 8, 7, 128, 64, 3, True), (2048, 3, 64, 8, 5, 128, 128, 3, True),
    (4096, 3, 128, 8, 2, 128, 128, 2, True),
)

DRY_RUN_SHAPES = ((256, 2, 64, 4, 1, 16, 16, 2, False), (256, 2, 64, 4, 2, 16, 16, 2, True))


def run_checks(shapes=CHECK_SHAPES, progress=True) -> list:
    rows = []
    for i, (M, H, d, W, rank, bm, bn, st, tma) in enumerate(shapes):
        cfg = A.AttentionConfig(M, H, d, W, rank, bm, bn, num_warps=8 if bm >= 64 else 4, num_stages=st, tma=tma,
                                local_last=i % 3 != 2, drip=i % 2 == 1, split_tail=i % 3 == 1,
                                stagger=i % 4 == 2, tail_parts=2 if i % 2 == 1 else 0)
        rows += check_shape(cfg, seed=M + H + d)
        if progress:
            bad = [r["variant"] for r in rows if r.get("ok") is False and r["config"] == cfg.label()]
            print(f"  check {cfg.label()} rank={rank}: {'FAIL ' + str(bad) if bad else 'ok'}", file=sys.stderr)
    return rows


def tune(M: int = 16384, heads: int = 3, head_dim: int = 128, world: int = 8, trials: int = 20) -> tuple:
    """FA-only time of each ``TUNE_CANDIDATES`` configuration at M, with the split tail (as the fused
    options that win use it); returns (fastest cfg, rows).

    A candidate that fails to compile or run, or gives a wrong result, is dropped."""
    import torch

    base = A.AttentionConfig(M, heads, head_dim, world, split_tail=True)
    q, k, v = random_qkv(base, 1)
    ref = None
    out = torch.empty_like(q)
    fns, cfgs = {}, {}
    sms = torch.cuda.get_device_properties(0).multi_processor_count if device() == "cuda" else 4
    for bn, st, tma, warps, per_sm in TUNE_CANDIDATES:
        cfg = replace(base, block_n=bn, num_stages=st, tma=tma, num_warps=warps,
                      programs=0 if per_sm == 1 else per_sm * sms)
        fn = lambda c=cfg: A.launch_fa(q, k, v, c, out=out)  # noqa: E731
        try:
            out.fill_(float("nan"))
            fn()
            _sync()
            ref = reference(q, k, v) if ref is None else ref
            res = A.compare(out, ref)
        except Exception as err:  # noqa: BLE001 - e.g. a candidate that does not fit shared memory
            print(f"  tune: {cfg.label()} failed: {type(err).__name__}: {str(err)[:300]}", file=sys.stderr)
            continue
        if not res["ok"]:
            print(f"  tune: {cfg.label()} wrong result {res}", file=sys.stderr)
            continue
        cfgs[cfg.label()], fns[cfg.label()] = cfg, fn
    if not fns:
        return base, []
    times, _ = time_variants(fns, trials=trials, warmup=2, rounds=4)
    rows = [kernel_row(cfgs[name], "fa_tune", t) for name, t in times.items()]
    for r in sorted(rows, key=lambda r: r["time(us)"]):
        print(f"  tune: {r['config']}: {r['time(us)']:.1f} us, {r['TFLOPs']:.0f} TFLOP/s", file=sys.stderr)
    best = min(rows, key=lambda r: r["time(us)"])
    return cfgs[best["config"]], rows


def pick_fused(cfg, trials: int = 10, *, table=None, reduce_rows=None, verbose: bool = True, **timing) -> tuple:
    """Time Fused at ``cfg.seq_len`` with each ``FUSED_OPTIONS`` (store cache, drip, split tail); returns (fastest
    cfg, rows).

    ``table``: the destination table (default: emulated destinations); ``reduce_rows(rows) -> rows``
    (W ranks: every rank's times reduced); ``timing``: keyword arguments of ``time_variants``."""
    q, k, v = random_qkv(cfg, 1)
    if table is None:
        dests = A.Destinations.emulated(cfg.layout, device())
        table = dests.table
    cfgs = {fused_tag(*opt): fused_options(cfg, opt) for opt in FUSED_OPTIONS}
    fns = {tag: (lambda c=c: A.launch_fa(q, k, v, c, dest_table=table)) for tag, c in cfgs.items()}
    times, _ = time_variants(fns, trials=trials, warmup=2, rounds=2, **timing)
    rows = [kernel_row(cfgs[tag], "fused_tune", t, **{f: getattr(cfgs[tag], f) for f in FUSED_FIELDS})
            for tag, t in times.items()]
    rows = reduce_rows(rows) if reduce_rows else rows
    for r in sorted(rows, key=lambda r: r["time(us)"]) if verbose else ():
        print(f"  fused {r['config']}: {r['time(us)']:.1f} us", file=sys.stderr)
    best = min(rows, key=lambda r: r["time(us)"])
    return next(c for c in cfgs.values() if c.label() == best["config"]), rows


def kernel_variants(cfg, q, k, v, out, table) -> tuple:
    """The Triton variants of one configuration, {name: callable} and {name: cfg}: FA-only into ``out``;
    Fused with ``cfg``'s (store cache, drip) as "fused" and every other ``FUSED_OPTIONS`` pair as
    "fused_<tag>"; Serial and its All-to-All alone ("a2a") with every ``STORE_CACHES`` operator."""
    fns = {"fa": lambda: A.launch_fa(q, k, v, cfg, out=out)}
    variant_cfg = {"fa": cfg}
    chosen = fused_choice(cfg)
    for opt in [chosen] + [o for o in FUSED_OPTIONS if o != chosen]:  # "fused" = the chosen one
        c, tag = fused_options(cfg, opt), "" if opt == chosen else fused_tag(*opt)
        fns[f"fused{tag}"] = lambda c=c: A.launch_fa(q, k, v, c, dest_table=table)
        variant_cfg[f"fused{tag}"] = c
    for store in [cfg.store_cache] + [m for m in STORE_CACHES if m != cfg.store_cache]:
        c, tag = replace(cfg, store_cache=store), "" if store == cfg.store_cache else store_tag(store)
        fns[f"serial{tag}"] = lambda c=c: A.launch_a2a(A.launch_fa(q, k, v, c, out=out), table, c)
        fns[f"a2a{tag}"] = lambda c=c: A.launch_a2a(out, table, c)
        variant_cfg.update({f"serial{tag}": c, f"a2a{tag}": c})
    return fns, variant_cfg


def measure(cfg, trials: int = 25, seed: int = 2, warmup: int = 5, rounds: int = 5) -> tuple:
    """Kernel rows (all variants), tile frames and correctness rows for one configuration."""
    import torch

    q, k, v = random_qkv(cfg, seed)
    ref = reference(q, k, v)
    dests = A.Destinations.emulated(cfg.layout, device())
    out = torch.empty_like(q)
    checks = []
    sdpa_out = {}
    for backend in sdpa_backends():
        try:
            sdpa_out[backend] = A.sdpa(q, k, v, backend)
            _sync()
            checks.append({"config": cfg.label(), "variant": f"sdpa_{backend}", **A.compare(sdpa_out[backend], ref)})
        except RuntimeError as err:
            print(f"  sdpa {backend} unavailable: {str(err)[:120]}", file=sys.stderr)
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
        _sync()
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
        _sync()
        tiles.append(tile_frame(c, log.cpu().numpy(), schedule=schedule))
    return rows, tiles, checks


def main(argv=None) -> int:
    from xstage.cli.attention import run_parser  # the flags are declared once, with `xstage attention run`

    return run(run_parser("python -m xstage.hw.attention.bench").parse_args(argv))


def run(args) -> int:
    """The sweep for parsed ``xstage attention run`` flags."""
    t_start = time.time()
    out_dir = Path(args.out)
    if not args.overwrite and (out_dir / "attention-kernel.parquet").exists():
        raise InputError("--out", str(out_dir), "already holds attention records (pass --overwrite to replace them)")
    if device() == "cuda":
        from xstage.hw.common.hostmap import check_mapping

        print("host mapping:", check_mapping(), file=sys.stderr)
        print("clocks (sm, mem, temp, power, reasons):", gpu_clocks(), file=sys.stderr)
    shapes = DRY_RUN_SHAPES if args.dry_run else CHECK_SHAPES
    try:
        checks = [] if args.no_checks else run_checks(shapes)
    except Exception as err:  # noqa: BLE001 - report, then still measure
        traceback.print_exc()
        checks = [{"variant": "checks", "ok": False, "error": f"{type(err).__name__}: {err}"}]
    failed = [c for c in checks if c.get("ok") is False]
    if args.dry_run:
        cfg, tune_rows = A.AttentionConfig(256, args.heads, args.head_dim, args.world_size, block_m=16,
                                           block_n=16, num_warps=4, num_stages=2), []
    elif args.no_tune:
        cfg, tune_rows = A.AttentionConfig(16384, args.heads, args.head_dim, args.world_size), []
    else:
        cfg, tune_rows = tune(heads=args.heads, head_dim=args.head_dim, world=args.world_size)
        cfg, store_rows = pick_fused(cfg)
        tune_rows += store_rows
    print(f"  kernel config: {cfg.label()} ({time.time() - t_start:.0f}s)", file=sys.stderr)
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
        print(f"  M={M}: done ({time.time() - t_start:.0f}s)", file=sys.stderr)
    measured = [r for r in rows if not r["variant"].endswith("_tune")]
    if measured:
        print(summary_table(measured))
    else:
        atomic_write_text(out_dir / "attention-checks.json", json.dumps(checks, indent=1, default=str),
                          overwrite=True)
    print("records:", *map(str, paths))
    print(f"checks: {len(checks)} rows, {len(failed)} failed" + (f": {failed}" if failed else ""))
    print(f"wall: {time.time() - t_start:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    exit_with(main, "attention_bench")
