"""GPU measurement of FA4 as the FA core of FlashAttention + Ulysses All-to-All (issue 16), one H200,
W ranks emulated (``fa4_variants`` lists the variants).

Per M: fresh random inputs; FA4 and cuDNN SDPA against a float32 reference on three row slices;
every variant that writes receive buffers run once into NaN-poisoned destinations and checked (all of
this rank's heads written, nothing else touched, values = FA4's own output within tolerance); then
every variant captured in a CUDA graph (eager if capture fails), timed with CUDA events in rotated
rounds after warm-up (``bench.time_variants``), and each non-FA variant paired against FA4 back to back
(``bench.paired_differences``). Records are saved after every M.

    python3 -m xstage.hw.attention.fa4_bench --out $OUT/attention-fa4

The flags and the printed summary: ``xstage.cli.bench_fa4``; ``run(args)`` takes its checked flags.
"""

import json
import time
import traceback
from pathlib import Path

from xstage.errors import InputError
from xstage.hw.attention import fa4, fa4_records as R
from xstage.hw.attention.fa4_layout import ReceiveLayout, row_slices
from xstage.hw.attention.fa4_variants import Fa4Case
from xstage.hw.common.log import hw_log

TILE_RATE_TFLOPS = 680.0  # FA4 on the H200 (issue 16's probe): sets the stagger step from the tile time
STAGGER_FRACTIONS = (1 / 3,)  # stagger step of fused_perchunk_st as a fraction of one tile's mainloop


def tile_us(lay, sms: int = 132) -> float:
    """Estimated mainloop time of one 128-row tile (one head) at ``TILE_RATE_TFLOPS`` over ``sms`` SMs."""
    return 4.0 * 128 * lay.seq_len * lay.head_dim / (TILE_RATE_TFLOPS * 1e12 / sms) * 1e6


def check_case(case, fns, log) -> list:
    """FA4/cuDNN against float32 on row slices; every destination-writing variant once into poisoned buffers.
    Drops from ``fns`` a variant that fails to run; returns the check rows."""
    import torch

    lay, rows = case.lay, []
    cfg = lay.label()
    t0 = time.monotonic()
    fns["fa4"]()
    torch.cuda.synchronize()
    rows.append({"config": cfg, "variant": "fa4", "kind": "first_call", "wall_s": time.monotonic() - t0})
    outs = {"fa4": case.fa_out.clone()}
    try:
        outs["cudnn"] = fns["cudnn"]().contiguous() if "cudnn" in fns else None
    except RuntimeError as err:
        log(f"  cudnn unavailable: {str(err)[:200]}")
        fns.pop("cudnn", None), fns.pop("serial_cudnn", None)
        outs["cudnn"] = None
    for name in [n for n in fns if n.startswith("fa4_t")]:
        fns[name]()
        torch.cuda.synchronize()
        outs[name] = case.fa_out.clone()
    for pname in [n for n in fns if n.startswith("pfa4")]:
        try:
            outs[pname] = check_pfa4(case, fns, pname, outs["fa4"], rows, cfg, log)
        except Exception as err:  # noqa: BLE001 - the persistent kernel failing: record it, keep the others
            rows.append({"config": cfg, "variant": pname, "ok": False, "error": f"{type(err).__name__}: {err}"[:800],
                         "trace": traceback.format_exc(limit=8)[-3000:]})
            log(f"  {pname}: FAILED to run: {type(err).__name__}: {str(err)[:600]}")
            tag = pname[len("pfa4"):]
            for name in [n for n in fns if n.startswith(pname) or (is_pers(n) and n.endswith("_pers" + tag))
                         or (not tag and n == "serial_pfa4")]:
                fns.pop(name)
            torch.cuda.synchronize()
    for r0, r1 in row_slices(lay.seq_len, 128):
        ref = fa4.reference_rows(case.q, case.k, case.v, r0, r1)
        for name, o in outs.items():
            if o is not None:
                rows.append({"config": cfg, "variant": name, "rows": [r0, r1], **fa4.err_vs_ref(o[0, r0:r1], ref)})
    if outs["cudnn"] is not None:
        rows.append({"config": cfg, "variant": "fa4_vs_cudnn", "kind": "info",
                     "max_abs_diff": float((outs["fa4"].float() - outs["cudnn"].float()).abs().max())})
    expected = {"serial_cudnn": outs["cudnn"][0] if outs["cudnn"] is not None else None}
    for name in [n for n in list(fns) if case.plan(n) is not None]:
        t0 = time.monotonic()
        try:
            try:
                res = case.check(name, fns[name], expected.get(name, outs["fa4"][0]))
            except Exception as err:  # noqa: BLE001 - chunk-major: retry once with K/V materialised
                if "_cm" not in name or case.kv_mode != "broadcast":
                    raise
                log(f"  {name}: stride-0 K/V refused ({type(err).__name__}: {str(err)[:200]}); materialising")
                torch.cuda.synchronize()
                case.materialise_kv()
                res = case.check(name, fns[name], expected.get(name, outs["fa4"][0]))
            if "_cm" in name:
                res["kv"] = case.kv_mode
        except Exception as err:  # noqa: BLE001 - e.g. FA4 refusing a layout: record it, time the others
            rows.append({"config": cfg, "variant": name, "ok": False, "error": f"{type(err).__name__}: {err}"[:600],
                         "trace": traceback.format_exc(limit=4)[-1500:]})
            log(f"  {name}: FAILED to run: {type(err).__name__}: {str(err)[:300]}")
            fns.pop(name)
            torch.cuda.synchronize()
            continue
        rows.append({"config": cfg, "variant": name, "first_call_s": time.monotonic() - t0, **res})
        if not res["ok"]:
            log(f"  {name}: check FAILED {res}")
    fns["fa4"]()  # the serial/ce variants' source, FA4's default tiles
    torch.cuda.synchronize()
    return rows


def is_pers(name: str) -> bool:
    """A variant run by PersistentSm90 or a diagnostic kernel (fa4_persistent): pfa4*, serial_pfa4, fused_*_pers*."""
    return name.startswith("pfa4") or name == "serial_pfa4" or "_pers" in name


def pers_kernel(name: str) -> str:
    """Which fa4_persistent kernel a variant runs ("fa4" for stock FA4's and cuDNN's)."""
    if not is_pers(name):
        return "fa4"
    tail = name[len("pfa4"):] if name.startswith("pfa4") else name.split("_pers", 1)[1] if "_pers" in name else ""
    return tail.lstrip("_") or "drain"


def check_pfa4(case, fns, name, want, rows, cfg, log):
    """PersistentSm90 FA-only into a NaN-poisoned HBM output: every element written, compared with stock FA4's
    output ``want``; returns its output (checked against float32 on row slices by the caller)."""
    import torch

    case.fa_out.fill_(float("nan"))
    torch.cuda.synchronize()
    t0 = time.monotonic()
    fns[name]()
    torch.cuda.synchronize()
    got = case.fa_out.clone()
    unwritten = int(torch.isnan(got).sum())
    diff = float(torch.nan_to_num((got.float() - want.float()).abs(), nan=float("inf")).max())
    res = {"config": cfg, "variant": f"{name}_vs_fa4", "first_call_s": time.monotonic() - t0, "unwritten": unwritten,
           "max_abs_diff": diff, "bitwise_equal": bool(torch.equal(got, want)),
           "ok": unwritten == 0 and diff <= 1e-3 + 1e-2 * float(want.float().abs().max())}
    rows.append(res)
    if not res["ok"]:
        log(f"  {name}: check FAILED {res}")
    return got


def recheck_pfa4(case, fns, log) -> list:
    """After the timing: each PersistentSm90 FA-only once more, poisoned, against stock FA4 (the dynamic
    scheduler's counter outlives a launch: every tile must still be computed)."""
    import torch

    rows = []
    fns["fa4"]()
    torch.cuda.synchronize()
    want = case.fa_out.clone()
    for name in [n for n in fns if n.startswith("pfa4")]:
        check_pfa4(case, fns, name, want, rows, case.lay.label(), log)
        rows[-1]["variant"] = f"{name}_vs_fa4_after_timing"
    from xstage.hw.attention.fa4_persistent import SPLIT_KERNELS, split_timeouts

    if any(pers_kernel(n) in SPLIT_KERNELS for n in fns):  # an owner that gave up waiting wrote NaN and counted
        n = split_timeouts()
        rows.append({"config": case.lay.label(), "variant": "split_timeouts", "timeouts": n, "ok": n == 0})
        if n:
            log(f"  split kernel: {n} owner threads timed out waiting for their partner")
    fns["fa4"]()
    torch.cuda.synchronize()
    return rows


def time_case(fns: dict, trials: int, pairs: int) -> tuple:
    """{name: [us]}, {name: paired us (vs fa4)}, {name: mode}: graphs captured once, then the project's timers."""
    from xstage.hw.common import timing as B

    replays, modes = {}, {}
    for name, fn in fns.items():
        fn()
        fn()
        replays[name], modes[name] = B.capture(fn)
    pre = lambda f: (f, "pre")  # noqa: E731 - already captured
    times, _ = B.time_variants(replays, trials=trials, warmup=3, rounds=5, capture_fn=pre)
    n_pairs = pairs if all(m == "graph" for m in modes.values()) else min(pairs, 12)  # eager: keep the host ahead
    others = {n: f for n, f in replays.items() if n not in ("fa4", "cudnn") and not n.startswith("fa4_")}
    paired = B.paired_differences(replays["fa4"], others, pairs=n_pairs, capture_fn=pre)
    return times, paired, modes


def measure_m(lay, fa, args, log, pfa=None, pdiag=None) -> tuple:
    import numpy as np
    import torch

    from xstage.hw.common.timing import gpu_clocks
    from xstage.hw.common.vmm import MixedRange

    props = torch.cuda.get_device_properties(0)
    clock = getattr(props, "clock_rate", 0) or 1_980_000
    st = [tile_us(lay, props.multi_processor_count) * f for f in STAGGER_FRACTIONS]
    case = Fa4Case(lay, fa, seed=args.seed + lay.seq_len, vmm_alloc=None if args.no_vmm else MixedRange,
                   tile_mns=args.tile_mn, stagger_us=st, clock_khz=clock, pfa=pfa, pdiag=pdiag)
    extra_rows = []
    if case.vmm_error:
        log(f"  VMM mixed range unavailable: {case.vmm_error}")
        extra_rows.append({"config": lay.label(), "variant": "fused_vmm", "kind": "skip", "ok": None,
                           "why": case.vmm_error})
    elif case.vmm is not None:
        extra_rows.append({"config": lay.label(), "variant": "vmm", "kind": "info", "host_kind": case.vmm.host_kind,
                           "granularity": case.vmm.granularity, "wrap": case.vmm.wrap, "attrs": case.vmm.attrs})
    extra_rows.append({"config": lay.label(), "variant": "host", "kind": "info", "how": case.host.how,
                       "wrap": case.host.wrap, "uva_identity": case.host.dptr == case.host.ptr})
    fns = case.variants()
    if args.variants != "all":
        keep = {x.strip() for x in args.variants.split(",")} | {"fa4"}
        fns = {n: f for n, f in fns.items() if n in keep or n.split("_t")[0] in keep and "_t" in n}
    try:
        checks = extra_rows + check_case(case, fns, log)
        before = gpu_clocks()
        times, paired, modes = time_case(fns, args.trials, args.pairs)
        after = gpu_clocks()
        checks += recheck_pfa4(case, fns, log)
        rows = []
        for name, t in times.items():
            pair = {"paired_minus_fa(us)": float(np.median(paired[name])), "pairs": len(paired[name])} \
                if name in paired else {}
            pers = pfa is not None and is_pers(name)
            sched = (pdiag or {}).get(pers_kernel(name), pfa).scheduler if pers else fa.scheduler
            rows.append(R.kernel_row(lay, name, t, timing=modes[name], scheduler=sched,
                                     kernel=pers_kernel(name),
                                     tile_mn="x".join(map(str, next((tm for tm in args.tile_mn
                                                                    if name.endswith(f"t{tm[0]}x{tm[1]}")), (128, 128)))),
                                     **{"stagger(us)": next((u for u in st if name.endswith(f"st{int(round(u))}")), 0.0)},
                                     clocks_before=before, clocks_after=after, **pair))
        return rows, checks
    finally:
        fns = None
        case.free()
        torch.cuda.empty_cache()


def save(out_dir: Path, tag: str, rows, checks, summary, meta) -> list:
    import pandas as pd

    from xstage.records import atomic_write_text, save_records

    sfx = f"-{tag}" if tag else ""
    paths = [save_records(out_dir / f"attention-fa4{sfx}-kernel.parquet", "kernel", pd.DataFrame(rows), meta,
                          overwrite=True)] if rows else []
    paths.append(atomic_write_text(out_dir / f"attention-fa4{sfx}-checks.json",
                                   json.dumps(checks, indent=1, default=str), overwrite=True))
    if summary is not None:
        paths.append(atomic_write_text(out_dir / f"attention-fa4{sfx}-summary.json",
                                       json.dumps(summary, indent=1, default=str), overwrite=True))
    return paths


def run(args, summarise=None) -> dict:
    """The checked sweep (``xstage.cli.bench_fa4.parse_args``): records saved after every M; returns rows,
    checks, summaries, paths and wall_s. ``summarise(rows) -> dict`` (``xstage.compare.attention_fa4.summary_file``,
    handed over by the CLI) makes the summary file written beside the records, and its ``per_M`` the
    returned summaries; None: no summary file."""
    t_start = time.monotonic()
    out_dir = Path(args.out)

    log = hw_log

    import torch

    from xstage.provenance import provenance

    if not torch.cuda.is_available():
        raise InputError("device", "cpu", "must be a CUDA GPU (this bench measures FA4 on the GPU)")
    torch.backends.cuda.matmul.allow_tf32 = False  # exact float32 reference
    torch.backends.cudnn.allow_tf32 = False
    fa = fa4.load(persistent=args.persistent)
    pfa = None if args.no_pers or args.persistent else fa4.load_persistent()
    pdiag = {} if pfa is None else {d: fa4.load_persistent(d, args.rank, args.world_size) for d in args.pers_diag}
    prov = provenance(with_gpu=True)
    prov["libraries"].update({k: v for k, v in fa4.versions().items() if v})
    meta = {"args": vars(args), "provenance": prov, "scheduler": fa.scheduler, "experiment": R.EXPERIMENT,
            "persistent_kernel": None if pfa is None else pfa.scheduler}
    log(f"FA4 stack: {fa4.versions()}; scheduler {fa.scheduler}; GPU {prov.get('gpu')}")
    rows, checks, summary, paths = [], [], None, []
    for M in args.seq_lens:
        if time.monotonic() - t_start > args.budget_s:
            log(f"budget: stopped before M={M}")
            checks.append({"variant": "budget", "M": M, "ok": None, "skipped": "time budget"})
            break
        lay = ReceiveLayout(M, args.heads, args.head_dim, args.world_size, args.rank)
        try:
            r, c = measure_m(lay, fa, args, log, pfa, pdiag)
        except Exception as err:  # noqa: BLE001 - keep the other M's results
            traceback.print_exc()
            checks.append({"config": lay.label(), "variant": "measure", "ok": False, "error": f"{type(err).__name__}: {err}"})
            torch.cuda.synchronize()
            continue
        rows += r
        checks += c
        summary = summarise(rows) if summarise else None
        paths = save(out_dir, args.tag, rows, checks, summary, meta)
        log(f"  M={M}: {len(r)} variants timed ({time.monotonic() - t_start:.0f}s)")
    if not paths:
        summary = summarise(rows) if summarise else None
        paths = save(out_dir, args.tag, rows, checks, summary, meta)
    return {"rows": rows, "checks": checks, "summaries": summary["per_M"] if summary else [], "paths": paths,
            "wall_s": time.monotonic() - t_start}


if __name__ == "__main__":  # the flags: xstage.cli.bench_fa4
    from xstage.cli.bench_fa4 import NAME, main
    from xstage.errors import exit_with

    exit_with(main, NAME)
