"""GPU measurement of the fused MoE FFN as in the paper's §5.2 (one H200, W = 8 ranks emulated).

Correctness first (fresh random tokens, weights and routings against a float32 reference; Combine
buffers poisoned before every run; a per-(row, N tile) write counter must read exactly 1; the
l2_full error flag must stay 0; a D = 0 schedule must trip the bounded spin and set it), then per
configuration: expert-wave and interleaved with remote stores (W-1 ranks host-mapped) and with
remote stores off (all Combine buffers in HBM), the user's baseline (``torch._grouped_mm`` twice
with SwiGLU, or a per-expert matmul loop when that is missing) and a separate Combine copy kernel;
CUDA events around CUDA-graph replays, warm-up, median of ``--trials``. One instrumented launch per
schedule fills the tile records (%globaltimer) and the local-store medians (``measured_*`` columns);
the simulator is replayed on them downstream (``xstage results moe``: ``compare.moe_records.resimulate``).
The parts: ``setup.py`` (one problem on the device), ``checks.py``, ``baseline.py``; this module times.

    python3 -m xstage.hw.moe.bench --out $OUT/moe            # the whole GPU run (benchmarks/gpu/moe.sh)
                                                             # (arguments: xstage.cli.bench_moe)
    TRITON_INTERPRET=1 python -m xstage.hw.moe.bench --dry-run --out /tmp/moe   # CPU dry run, tiny shapes
"""


import json
import math
import time
import traceback
from pathlib import Path

import numpy as np

from xstage.hw.common.timing import device, sync, time_variants
from xstage.hw.moe.baseline import baseline_ffn, grouped_mm_fn, quack_grouped_fn, scaled_grouped_mm_fns
from xstage.hw.moe.checks import check_deadlock_bails, check_problem
from xstage.hw.moe.setup import Setup, num_sms, tune_lead
from xstage.hw.moe.sweep_heldout2 import HELDOUT2
from xstage.hw.moe.sweep_heldout3 import HELDOUT3
from xstage.errors import InputError
from xstage.records import atomic_write_text
from xstage.records.moe import SCHEDULES, kernel_row, measured_columns, same_order, save_run, tile_frame, tile_timings
from xstage.sim.workloads.moe_layout import MoeProblem
from xstage.hw.common.log import hw_log

# (hidden, intermediate, tokens, routing, precision, world_size): one GPU's share, 8 local experts, top-8.
# Combine drain time ~ tokens*hidden*2*(W-1)/W / R against compute ~ 6*tokens*hidden*I / rate: the large-I
# shapes are compute-bound on the PCIe host path (where burst shaping can show), the small-I ones drain-bound.
# The earlier runs' shapes (run-d815b94); the W-rank path (dist.py) keeps its own list.
_SHAPES = ((2048, 4096, 8192), (4096, 8192, 8192), (7168, 2048, 8192), (2048, 512, 4096), (4096, 1024, 8192),
           (7168, 512, 8192), (7168, 2048, 16384))


def catalog_sweep(setting: str, precisions=("bf16", "w8a8")) -> list:
    """(model, hidden, intermediate, tokens, routing, precision, world_size, local experts) over the catalog's
    seven model shapes (``xstage.sim.workloads.catalog``) at one token setting, both routings, W = EP = 8:
    experts / EP local experts, tokens_total * top_k / EP assignments received (the mean rank's share)."""
    from xstage.sim.workloads.catalog import moe_catalog

    cat = moe_catalog()
    ep = int(cat["expert_parallel"])
    total = int(cat["settings"][setting]["tokens_total"])
    return [(f"{model}-{setting}", int(m["hidden"]), int(m["intermediate"]), total * int(m["top_k"]) // ep, r, prec, ep,
             int(m["experts"]) // ep) for prec in precisions for model, m in cat["models"].items() for r in ("balanced", "skewed")]


# the earlier runs' 20 configurations (run-d815b94): re-measured, so no older row outlives this kernel
EARLIER = [("earlier", h, i, t, r, "bf16", 8, 8) for (h, i, t) in _SHAPES for r in ("balanced", "skewed")] \
    + [("earlier", h, i, t, r, "w8a8", 8, 8) for (h, i, t) in ((2048, 4096, 8192), (7168, 2048, 8192))
       for r in ("balanced", "skewed")] \
    + [("earlier", 7168, 2048, 8192, r, "bf16", 2, 8) for r in ("balanced", "skewed")]
# the budget cuts from the end: setting S (bf16, W8A8) first, then the earlier shapes, then setting M (bf16)
SWEEP = catalog_sweep("S") + EARLIER + catalog_sweep("M", ("bf16",))
# Configurations SWEEP never measured, for predictions fixed before they ran (issue 15's held-out MoE check):
# the paper's token count (setting L) in bf16 and setting M in W8A8
HELDOUT = catalog_sweep("L", ("bf16",)) + catalog_sweep("M", ("w8a8",))
SWEEPS = {"main": SWEEP, "heldout": HELDOUT, "heldout2": HELDOUT2, "heldout3": HELDOUT3}  # hw/moe/sweep_heldout*.py
CHECKS = [(2048, 512, 1000, "balanced", "bf16"), (4096, 1024, 3000, "skewed", "bf16"),
          (7168, 2048, 2500, "skewed", "bf16"), (1536, 1536, 2000, "skewed", "bf16"),
          (4096, 1024, 3000, "skewed", "w8a8"), (6144, 2048, 2000, "balanced", "w8a8")]
DRY = dict(block_m=16, block_n=32)
DRY_SWEEP = [("dry", 64, 32, 70, "balanced", "bf16", 8, 8), ("dry", 64, 32, 90, "skewed", "bf16", 4, 4),
             ("dry", 64, 64, 90, "skewed", "w8a8", 8, 8)]
# The tile configuration from benchmarks/moe_tune.py (data/moe/tune-9a6f7ff): BLOCK_N 256 (an L1 tile =
# 128 intermediate columns of gate and up), 8 rows walked side by side, TMA loads of x, weights and
# activations, 3 stages: 0.94-0.95x torch._grouped_mm on its four shapes (0.63-0.85x before), W8A8
# 0.90-0.92x torch._scaled_grouped_mm (0.70x before); warp specialisation changed nothing.
BLOCK_N = 256
GROUP_ROWS = 8
TUNE = [(64, 3, 8, True, True), (64, 4, 8, True, True)]  # bf16
TUNE_KEYS = ("block_k", "num_stages", "num_warps", "tma", "act_tma")
TUNE_W8A8 = [(128, 3, 8, True, True), (128, 4, 8, True, True)]
TUNE_KEYS_W8A8 = TUNE_KEYS
W8A8_KW = {"block_k": 128, "num_stages": 3, "num_warps": 8}   # the W-rank path's (dist.py, BLOCK_N 128)
W8A8_FAST = {"block_k": 128, "num_stages": 3, "num_warps": 8, "tma": True, "act_tma": True}
# early_rows + prefetch (benchmarks/moe_place_tune.py, data/moe/place-tune-7c8dfb2): a Linear-2 tile's row
# destinations and the next tile's fields loaded before the mainloop; the Linear-2 gap 5.6-6.5 -> 2.9-3.3 us,
# 0.900-0.907 -> 0.918-0.924x the faster library on three long-K configurations (prefetch alone: 0.880-0.899)
BF16_FAST = {"block_k": 64, "num_stages": 3, "num_warps": 8, "tma": True, "act_tma": True, "early_rows": True,
             "prefetch": True}
# Short Linear-2 (K = I <= SHORT_K_MAX, bf16): two programs per SM on a schedule built for 2 x SMs programs,
# BLOCK_N 128 and at most 128 registers per thread so both fit (98 KB shared, 128 registers: 2 per SM), so
# one program's epilogue overlaps the other's mainloop (benchmarks/moe_shortk_tune.py, data/moe/shortk-tune-
# f6372ea-wip: 0.825-0.917x -> 0.908-1.006x torch._grouped_mm on the five short-K misses; BLOCK_M 64 at two per SM
# 0.65-0.89x; I = 2048 / 4096 controls 0.947 / 0.946 -> 0.937 / 0.952, so long K keeps BF16_FAST).
# Extended to I = 1536 (DiT-MoE, two local experts) by benchmarks/moe_small_tune.py (data/moe/small-tune-3a1632c):
# 0.99 / 0.93 / 0.92 / 0.89x -> 1.16 / 1.10 / 1.03 / 0.97x torch._grouped_mm, 0.71-0.76x -> 0.79-0.86x quack.
# Then early_rows + prefetch and 16 rows side by side (place-tune-7c8dfb2: 0.835 -> 0.854 geomean x the faster
# library on the seven short-K configurations under 0.9; SM placement by %smid lost 8-13 %: not used).
SHORT_K_MAX = 1536
BF16_SHORT_K = {"block_n": 128, "programs_per_sm": 2, "group_rows": 16, "kernel": {**BF16_FAST, "maxnreg": 128}}
# The flattened kernel's other load path (``alt_kw``): the per-tile kernel of BF16_SHORT_K before it
UNFLAT = {"block_k": 64, "num_stages": 3, "tma": True, "act_tma": True, "early_rows": True, "prefetch": True}
DRY_KW = {"block_k": 16, "num_stages": 1, "num_warps": 4}
DRY_KW_TMA = {**DRY_KW, "tma": True, "act_tma": True}


def config_tiles(prec: str, intermediate: int, kw: dict, kw8: dict, dry: bool, short_k: dict | None = None,
                 long_k: dict | None = None, hidden: int | None = None) -> tuple:
    """(problem blocks, programs per SM, kernel options) the run uses for one configuration: the dry run's
    tiny tiles, W8A8's options, the tuned bf16 options for long K (updated by ``long_k``: the run's
    ``--long-k-kernel``) and ``BF16_SHORT_K``'s (updated by ``short_k``: ``--short-k-kernel``) for short K.
    A ``group_rows`` entry of ``short_k`` / ``long_k`` is not a kernel option: ``config_group_rows``. ``flat``
    (``hw/moe/flat.py``) applies only where ``hidden == intermediate`` (one K chunk per tile: the only form Triton
    3.6 pipelines); elsewhere the short-K configurations keep ``BF16_SHORT_K``."""
    if dry:
        return dict(DRY), 1, kw8 if prec == "w8a8" else kw
    if prec == "w8a8":
        return {"block_n": BLOCK_N}, 1, kw8
    if intermediate <= SHORT_K_MAX:
        extra = {k: v for k, v in (short_k or {}).items() if k not in SCHEDULE_KEYS}
        if extra.get("flat") and hidden != intermediate:
            extra = {}
        return {"block_n": BF16_SHORT_K["block_n"]}, BF16_SHORT_K["programs_per_sm"], {**BF16_SHORT_K["kernel"], **extra}
    return {"block_n": BLOCK_N}, 1, {**kw, **{k: v for k, v in (long_k or {}).items() if k not in SCHEDULE_KEYS}}


SCHEDULE_KEYS = ("group_rows", "balance")   # options of the schedule, not of the kernel


def config_balance(prec: str, intermediate: int, short_k: dict | None = None, long_k: dict | None = None) -> bool:
    """Whether one bf16 configuration's schedules deal the L1 and L2 remainders apart (``balance`` in the run's
    short-K / long-K options; ``xstage.sim.schedules._merge``); False for W8A8 and by default."""
    if prec != "bf16":
        return False
    return bool(((short_k if intermediate <= SHORT_K_MAX else long_k) or {}).get("balance", False))


def config_group_rows(prec: str, intermediate: int, group_rows: int, short_k: dict | None = None,
                      long_k: dict | None = None) -> int:
    """Rows walked side by side for one bf16 configuration: ``group_rows`` unless the run's short-K / long-K
    options name their own."""
    if prec != "bf16":
        return group_rows
    if intermediate <= SHORT_K_MAX:
        return int((short_k or {}).get("group_rows", BF16_SHORT_K.get("group_rows", group_rows)))
    return int((long_k or {}).get("group_rows", group_rows))


def measure(problem: MoeProblem, sms: int, kw: dict, trials: int, dry: bool, group_rows: int = 1,
            quack: bool = False, balance: bool = False, **columns) -> tuple:
    """(kernel rows, tile frames, checks) of one configuration: the lead D tuned, what is timed checked,
    every variant timed, one instrumented launch per schedule (GPU only) for the tiles and the measured
    medians (``measured_*``: ``xstage.compare.moe_records.resimulate`` replays the simulator on them).
    ``quack`` (bf16): quack's grouped GEMM timed beside ``torch._grouped_mm`` (``quack_grouped_mm``), checked first."""
    s = Setup(problem, sms, seed=problem.seed + 11, group_rows=group_rows, balance=balance)
    lead_us = tune_lead(s, kw, dry)
    alt = ("tma" in kw or kw.get("flat")) and fits(s, alt_kw(kw))
    checks = []
    fns, gname = variant_fns(s, kw, alt_loads=alt, quack=quack, checks=checks)
    ref = s.reference()
    kws = {"": kw, **({f"_{alt_tag(kw)}": alt_kw(kw)} if alt else {})}
    for tag, k in kws.items():  # what is timed is correct (poisoned Combine, fresh routing)
        for sched in SCHEDULES:
            s.combine[True].poison()
            s.dev[sched].error.zero_()
            s.run(sched, True, k)
            sync()
            checks.append({"config": problem.label(), "variant": f"{sched}{tag}_timed", **s.combine[True].check(ref),
                           "error_flag": int(s.dev[sched].error.item())})
            checks[-1]["ok"] = checks[-1]["ok"] and checks[-1]["error_flag"] == 0
    del ref
    opts = {"warmup": 0, "rounds": 1} if dry else {"warmup": 3, "rounds": 4}
    times, modes = time_variants(fns, trials=trials, **opts)
    rows, _copy_GBps = kernel_rows(s, kw, times, modes, lead_us, baseline=gname, group_rows=group_rows,
                                   **({"balance": True} if balance else {}), **columns)
    tiles, timings = tile_records(s, kw)   # instrumented launches: tile records and the local-store medians
    for r in rows:
        r.update(measured_columns(timings))
    return rows, tiles, checks


def fits(s: Setup, kw: dict) -> bool:
    """False (logged) when ``kw``'s programs cannot all be resident on this GPU (``residency``), else True."""
    try:
        s.run("expert_wave", False, kw)
        return True
    except InputError as err:
        hw_log(f"  {s.problem.label()} {kw}: {err}")
        return False


def alt_kw(kw: dict) -> dict:
    """The other load path: pointer loads where ``kw`` uses TMA (activations too), TMA where it does not; for the
    flattened kernel (``flat``) the per-tile kernel it replaces (``UNFLAT``: paired on the same inputs)."""
    if kw.get("flat"):
        return {**{k: v for k, v in kw.items() if k != "flat"}, **UNFLAT}
    if kw.get("gluon"):  # the Gluon kernel (hw/moe/gluon.py): the Triton kernel it replaces, same tiles
        return {k: v for k, v in kw.items() if not k.startswith("gluon")}
    return {**kw, "tma": not kw["tma"], "act_tma": not kw["tma"] and kw.get("act_tma", False)}


def alt_tag(kw: dict) -> str:
    return "unflat" if kw.get("flat") else "triton" if kw.get("gluon") else "ptr" if kw["tma"] else "tma"


def variant_fns(s: Setup, kw: dict, alt_loads: bool = True, quack: bool = False, checks: list | None = None) -> tuple:
    """({variant: fn} of one configuration, the grouped-GEMM baseline's name or None): both schedules with
    remote stores (``s.combine[True]``) and local, the other load path too (``alt_loads``, when ``kw`` names
    one), the grouped-GEMM baseline (bf16) and the separate Combine copy to the remote destinations."""
    import torch

    from xstage.hw.moe import kernel as M

    problem = s.problem
    fns = {}
    for sched in SCHEDULES:
        fns[sched] = lambda sc=sched: s.run(sc, True, kw)
        fns[f"{sched}_local"] = lambda sc=sched: s.run(sc, False, kw)
    if alt_loads and ("tma" in kw or kw.get("flat")):  # the other load path too: do TMA loads keep flowing behind backpressured stores?
        alt, tag = alt_kw(kw), alt_tag(kw)
        for sched in SCHEDULES:
            fns[f"{sched}_{tag}"] = lambda sc=sched: s.run(sc, True, alt)
            fns[f"{sched}_local_{tag}"] = lambda sc=sched: s.run(sc, False, alt)
    gname = None
    if s.w8a8:  # the fp8 grouped GEMM (torch._scaled_grouped_mm) where it runs; the copy moves bf16 rows
        a_fixed = torch.zeros((len(s.packed_rank), problem.hidden), dtype=torch.bfloat16, device=device())
        fp8 = scaled_grouped_mm_fns(s)
        if fp8 is not None:
            gemms, ffn, gname = fp8
            fns["grouped_mm"] = gemms
            fns["baseline_ffn"] = ffn
    else:
        gemm, gname = grouped_mm_fn(s)
        a_fixed = baseline_ffn(s, gemm)  # warm + a packed output for the copy
        I = problem.intermediate
        act_fixed = (gemm(s.xp, s.w1)[:, :I] * 1).contiguous()
        fns["grouped_mm"] = lambda: (gemm(s.xp, s.w1), gemm(act_fixed, s.w2))
        fns["baseline_ffn"] = lambda: baseline_ffn(s, gemm)
        if quack:  # the other grouped-GEMM library on the same inputs, in the same rotation
            qfn, qcheck = quack_grouped_fn(s, gemm, act_fixed)
            if checks is not None:
                checks.append(qcheck)
            if qfn is not None:
                fns["quack_grouped_mm"] = qfn
    fns["combine_copy"] = lambda: M.launch_combine_copy(a_fixed, s.packed_rank, s.packed_row, s.combine[True],
                                                          block_n=problem.block_n)
    return fns, gname


def same_orders(s: Setup) -> bool:
    """True when ``s``'s interleaved order is its expert-wave order, tile for tile (the same launch twice:
    no winner to predict); from the schedules actually run (``xstage.compare.moe_records.schedules_identical`` rebuilds
    them for records that lack the column)."""
    return same_order(*(s.schedules[k] for k in SCHEDULES))


def kernel_rows(s: Setup, kw: dict, times: dict, modes: dict, lead_us: dict, **columns) -> tuple:
    """Kernel records of one configuration's timed variants (plus ``baseline_total`` = baseline_ffn +
    combine_copy), with ``columns`` added to every row; and the Combine copy's rate (GB/s, remote bytes)."""
    errors = {k: int(d.error.item()) for k, d in s.dev.items()}
    bytes_ = s.layout.combine_bytes()
    extra = {"lead_rows": s.lead, "lead_knee_rows": s.knee, "lead_tune(us)": json.dumps(lead_us), "num_sms": s.sms,
             "wave_experts": s.schedules["expert_wave"].params["wave_experts"][0], "rows": s.layout.grid.rows,
             "schedules_identical": same_orders(s),
             "local(bytes)": bytes_["local_bytes"], "remote(bytes)": bytes_["remote_bytes"],
             **{f"kernel_{k}": v for k, v in kw.items()}, **columns}
    rows = [kernel_row(s.problem, name, t, timing=modes[name], **extra) for name, t in times.items()]
    if "baseline_ffn" in times:
        total = np.asarray(times["baseline_ffn"]) + np.asarray(times["combine_copy"])
        rows.append(kernel_row(s.problem, "baseline_total", total, timing="sum", **extra))
    copy_us = next(r["time(us)"] for r in rows if r["variant"] == "combine_copy")
    copy_GBps = bytes_["remote_bytes"] / copy_us / 1e3
    for r in rows:
        r["combine_copy(GBps)"] = copy_GBps
        r["error_flag"] = errors.get(r["variant"].replace("_local", ""), 0)
    return rows, copy_GBps


def tile_records(s: Setup, kw: dict, remotes=(True, False)) -> tuple:
    """One instrumented launch per (schedule, remote): (tile frames, {schedule: local-store medians}).
    GPU only (the interpreter cannot run the %globaltimer asm): ([], {}) elsewhere."""
    tiles, timings = [], {}
    if device() != "cuda":
        return tiles, timings
    import torch

    for sched in SCHEDULES:
        for remote in remotes:
            log = torch.zeros((len(s.dev[sched].tiles_np), 8), dtype=torch.int64, device="cuda")
            s.run(sched, remote, kw, tile_log=log)
            sync()
            f = tile_frame(s.layout, s.dev[sched].tiles_np, log.cpu().numpy(), schedule=sched, remote=remote)
            tiles.append(f)
            if not remote:
                timings[sched] = tile_timings(f)
    return tiles, timings


def tune(sms: int, trials: int = 8, precision: str = "bf16") -> tuple:
    """Pick the kernel options (``TUNE_KEYS`` / ``TUNE_KEYS_W8A8``) by the interleaved local-store time on
    one mid shape of ``precision``; a candidate that does not compile (e.g. too much shared memory) is skipped."""
    keys, cands = (TUNE_KEYS, TUNE) if precision == "bf16" else (TUNE_KEYS_W8A8, TUNE_W8A8)
    s = Setup(MoeProblem(7168, 2048, 8192, routing="balanced", precision=precision, block_n=BLOCK_N), sms, seed=5,
              group_rows=GROUP_ROWS)
    fns = {c: (lambda c=c: s.run("interleaved", False, dict(zip(keys, c)))) for c in cands}
    ok = {}
    for c, fn in fns.items():
        try:
            fn()
            sync()
            ok[c] = fn
        except Exception as err:  # noqa: BLE001 - a config that does not compile is skipped
            hw_log(f"  tune {precision} {c}: {type(err).__name__}: {str(err)[:100]}")
    times, _ = time_variants(ok, trials=trials, warmup=2, rounds=2)
    med = {c: float(np.median(t)) for c, t in times.items()}
    for c, t in sorted(med.items(), key=lambda x: x[1]):
        hw_log(f"  tune {precision} {', '.join(keys)} = {c}: {t:.0f} us")
    best = min(med, key=med.get)
    return dict(zip(keys, best)), med


def run(args) -> dict:
    """The whole GPU run of ``args`` (``xstage.cli.bench_moe`` parses and checks them): checks, tuning,
    the timed sweep; writes the records under ``args.out``. Returns {"rows", "checks", "failed", "paths"}."""
    from xstage.provenance import provenance

    t_start = time.time()
    out_dir = Path(args.out)
    dry = args.dry_run
    sms = num_sms(dry)
    blocks = DRY if dry else {"block_n": BLOCK_N}
    group_rows = 2 if dry else GROUP_ROWS
    kw = dict(DRY_KW_TMA) if dry else dict(BF16_FAST)
    kw8 = dict(DRY_KW) if dry else dict(W8A8_FAST)
    short_k = json.loads(Path(args.short_k_kernel).read_text()) if getattr(args, "short_k_kernel", None) else None
    long_k = json.loads(Path(args.long_k_kernel).read_text()) if getattr(args, "long_k_kernel", None) else None
    quack = bool(getattr(args, "quack", False))
    if device() == "cuda":
        from xstage.hw.common.hostmap import check_mapping

        hw_log("host mapping:", check_mapping())
    checks = []
    if not args.no_checks:
        try:
            for h, i, t, r, prec, *_ in ([c[1:] for c in DRY_SWEEP] if dry else CHECKS):
                if args.precision not in (None, prec):
                    continue
                cb, cpps, ckw = config_tiles(prec, i, kw, kw8, dry, short_k, long_k, hidden=h)
                checks += check_problem(MoeProblem(h, i, t, routing=r, seed=t, precision=prec, **cb), sms * cpps,
                                        ckw, seed=t, group_rows=config_group_rows(prec, i, group_rows, short_k, long_k),
                                        balance=config_balance(prec, i, short_k, long_k))
                hw_log(f"  checks {h}/{i}/{t}/{r}/{prec}: " + ", ".join(f"{c['variant']}={'ok' if c['ok'] else 'FAIL'}"
                      for c in checks if c["config"] == checks[-1]["config"]))
            if not dry and args.precision != "w8a8":
                checks.append(check_deadlock_bails(MoeProblem(2048, 512, 2000, **blocks), sms, kw))
                hw_log(f"  D=0 bails: {checks[-1]}")
        except Exception as err:  # noqa: BLE001 - report, then still measure
            traceback.print_exc()
            checks.append({"variant": "checks", "ok": False, "error": f"{type(err).__name__}: {err}"})
    failed = [c for c in checks if not c.get("ok")]
    hw_log(f"  checks: {len(checks) - len(failed)}/{len(checks)} ok ({time.time() - t_start:.0f}s)")
    tune_med = {}
    for prec in ("bf16", "w8a8") if not dry and not args.no_tune else ():
        if args.precision in (None, prec):
            try:
                best, med = tune(sms, precision=prec)
                kw, kw8 = ({**kw, **best}, kw8) if prec == "bf16" else (kw, {**kw8, **best})
                tune_med.update({(prec, *c): t for c, t in med.items()})
            except Exception:  # noqa: BLE001 - keep the defaults
                traceback.print_exc()
    hw_log(f"  kernel {kw} ({time.time() - t_start:.0f}s)")
    rows, tiles = [], []
    models = {m for m in (getattr(args, "models", None) or "").split(",") if m}
    sweep = [c for c in (DRY_SWEEP if dry else SWEEPS[getattr(args, "sweep", "main")]) if args.precision in (None, c[5]) and (not models or c[0] in models)]
    for model, h, i, t, r, prec, world, experts in sweep[:args.max_configs]:
        if time.time() - t_start > args.budget_s:
            hw_log(f"  budget reached: skipping {model} {h}/{i}/{t}/{r}/{prec}/W{world}")
            continue
        cb, pps, ckw = config_tiles(prec, i, kw, kw8, dry, short_k, long_k, hidden=h)
        try:
            kr, tr, kc = measure(MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world,
                                            **cb), sms * pps, ckw, args.trials, dry,
                                 group_rows=config_group_rows(prec, i, group_rows, short_k, long_k),
                                 balance=config_balance(prec, i, short_k, long_k), quack=quack and prec == "bf16", model=model, programs_per_sm=pps)
            checks += kc
            failed += [c for c in kc if not c.get("ok")]
        except Exception as err:  # noqa: BLE001 - keep the other configurations
            traceback.print_exc()
            failed.append({"variant": "measure", "config": f"{h}/{i}/{t}/{r}/{prec}/W{world}", "ok": False,
                           "error": f"{type(err).__name__}: {err}"})
            checks.append(failed[-1])
            continue
        rows += kr
        tiles += tr
        by = {x["variant"]: x for x in kr}
        gm = by["grouped_mm"]["time(us)"] if "grouped_mm" in by else math.nan
        qm = f" quack {by['quack_grouped_mm']['time(us)']:.0f}" if "quack_grouped_mm" in by else ""
        hw_log(f"  {kr[0]['config']}: wave {by['expert_wave']['time(us)']:.0f} int {by['interleaved']['time(us)']:.0f}"
              f" local {by['expert_wave_local']['time(us)']:.0f}/{by['interleaved_local']['time(us)']:.0f}"
              f" grouped_mm {gm:.0f}{qm} copy {by['combine_copy']['time(us)']:.0f} us ({time.time() - t_start:.0f}s)")
    tune_us = {str(k): v for k, v in tune_med.items()}
    meta = {"config": {"args": vars(args), "kernel": kw, "kernel_w8a8": kw8, "num_sms": sms, "tune_us": tune_us,
                       "short_k": {"max_intermediate": SHORT_K_MAX, **BF16_SHORT_K, "run_options": short_k},
                       "long_k_options": long_k, "quack": quack,
                       "block_n": blocks.get("block_n"), "group_rows": group_rows,
                       "sweep": sweep},
            "provenance": provenance(with_gpu=device() == "cuda")}
    paths = []
    if rows:
        paths = save_run(out_dir, rows, tiles, checks, meta, args.overwrite)
        for path in paths:
            hw_log(f"wrote {path}")
    else:
        paths = [atomic_write_text(out_dir / "moe-checks.json", json.dumps(checks, indent=1, default=str),
                                   overwrite=True)]
    hw_log(f"moe_bench: {len(failed)} failed checks, {time.time() - t_start:.0f}s")
    return {"rows": rows, "checks": checks, "failed": failed, "paths": paths}


if __name__ == "__main__":  # the flags: xstage.cli.bench_moe
    from xstage.cli.bench_moe import NAME, main
    from xstage.errors import exit_with

    exit_with(main, NAME)
