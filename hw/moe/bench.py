"""GPU measurement of the fused MoE FFN as in the paper's §5.2 (one H200, W = 8 ranks emulated).

Correctness first (fresh random tokens, weights and routings against a float32 reference; Combine
buffers poisoned before every run; a per-(row, N tile) write counter must read exactly 1; the
l2_full error flag must stay 0; a D = 0 schedule must trip the bounded spin and set it), then per
configuration: expert-wave and interleaved with remote stores (W-1 ranks host-mapped) and with
remote stores off (all Combine buffers in HBM), the user's baseline (``torch._grouped_mm`` twice
with SwiGLU, or a per-expert matmul loop when that is missing) and a separate Combine copy kernel;
CUDA events around CUDA-graph replays, warm-up, median of ``--trials``. One instrumented launch per
schedule fills the tile records (%globaltimer); the local-store medians feed the simulator, whose
predicted winner is stored beside the measurement.

    python3 -m xstage.hw.moe.bench --out $OUT/moe            # the whole GPU run (benchmarks/gpu/moe.sh)
    TRITON_INTERPRET=1 python -m xstage.hw.moe.bench --dry-run --out /tmp/moe   # CPU dry run, tiny shapes
"""

import json
import math
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pandas as pd

from xstage.errors import InputError
from xstage.hw.moe import kernel as M
from xstage.compare import moe_records as R
from xstage.hw.moe import w8a8 as Q
from xstage.sim.workloads.moe_layout import MoeProblem, check_layout, dispatch_layout, sequential_schedule
from xstage.provenance import provenance
from xstage.records import atomic_write_text, save_records
from xstage.sim.model import lead_knee_rows
from xstage.sim.schedules import make_moe_schedule

# (hidden, intermediate, tokens, routing, precision, world_size): one GPU's share, 8 local experts, top-8.
# Combine drain time ~ tokens*hidden*2*(W-1)/W / R against compute ~ 6*tokens*hidden*I / rate: the large-I
# shapes are compute-bound on the PCIe host path (where burst shaping can show), the small-I ones drain-bound.
# W8A8 and the W = 2 cases last: the time budget cuts those first.
_SHAPES = ((2048, 4096, 8192), (4096, 8192, 8192), (7168, 2048, 8192), (2048, 512, 4096), (4096, 1024, 8192),
           (7168, 512, 8192), (7168, 2048, 16384))
SWEEP = [(h, i, t, r, "bf16", 8) for (h, i, t) in _SHAPES for r in ("balanced", "skewed")] \
    + [(h, i, t, r, "w8a8", 8) for (h, i, t) in ((2048, 4096, 8192), (7168, 2048, 8192))
       for r in ("balanced", "skewed")] \
    + [(7168, 2048, 8192, r, "bf16", 2) for r in ("balanced", "skewed")]
CHECKS = [(2048, 512, 1000, "balanced", "bf16"), (4096, 1024, 3000, "skewed", "bf16"),
          (7168, 2048, 2500, "skewed", "bf16"), (4096, 1024, 3000, "skewed", "w8a8")]
DRY = dict(block_m=16, block_n=32)
DRY_SWEEP = [(64, 32, 70, "balanced", "bf16", 8), (64, 32, 90, "skewed", "bf16", 4), (64, 64, 90, "skewed", "w8a8", 8)]
TUNE = [(64, 4, 8, False), (64, 3, 8, False), (64, 4, 8, True), (64, 3, 8, True), (128, 3, 8, True)]  # bf16
TUNE_KEYS = ("block_k", "num_stages", "num_warps", "tma")
TUNE_W8A8 = [(128, 3, 8), (128, 4, 8), (128, 5, 8), (256, 3, 8), (64, 4, 8), (128, 4, 4)]  # fp8: twice the K per byte
TUNE_KEYS_W8A8 = ("block_k", "num_stages", "num_warps")
W8A8_KW = {"block_k": 128, "num_stages": 3, "num_warps": 8}
DRY_KW = {"block_k": 16, "num_stages": 1, "num_warps": 4}
DRY_KW_TMA = {**DRY_KW, "tma": True}


def device() -> str:
    import torch

    return "cpu" if M.interpreting() or not torch.cuda.is_available() else "cuda"


def _sync() -> None:
    import torch

    if device() == "cuda":
        torch.cuda.synchronize()


def num_sms(dry: bool) -> int:
    import torch

    if dry or device() == "cpu":
        return 2
    n = torch.cuda.get_device_properties(0).multi_processor_count
    return n - n % 2


class Setup:
    """Tensors, layouts and schedules of one problem on this device."""

    def __init__(self, problem: MoeProblem, sms: int, seed: int, lead: int | None = None, *, layout=None,
                 x_recv=None, weights=None, combine=None):
        """``layout``, ``x_recv`` (Dispatch's result), ``weights`` (w1, w2) and ``combine`` (the remote
        destinations: anything with ``table``, ``pointers``, ``buffers``, ``poison``) replace the emulated
        ones when given (the W-rank path, ``xstage.hw.moe.dist``)."""
        import torch

        dev = device()
        self.problem = p = problem
        self.layout = lay = layout if layout is not None else dispatch_layout(problem)
        check_layout(lay)
        if x_recv is None:
            gen = torch.Generator(device=dev).manual_seed(seed)
            tokens = torch.randn((p.world_size * p.tokens_per_rank, p.hidden), device=dev, generator=gen)
            x_recv = M.dispatch(tokens.to(torch.bfloat16), lay)
        self.x = x_recv
        self.w1, self.w2 = weights if weights is not None else M.random_weights(p, dev, seed=seed + 7)
        self.w1_packed = M.pack_w1(self.w1)
        self.act = torch.empty((lay.recv_rows, p.intermediate), dtype=torch.bfloat16, device=dev)
        self.w8a8 = p.precision == "w8a8"
        if self.w8a8:
            self.wq = Q.W8A8Weights(self.w1, self.w2)
            self.xq, self.sx = Q.quantize_activations(self.x)
            self.act_q = torch.empty((lay.recv_rows, p.intermediate), dtype=torch.float8_e4m3fn, device=dev)
            self.sact = torch.zeros((lay.recv_rows, 2 * p.intermediate // p.block_n), dtype=torch.float32, device=dev)
        self.sms = sms
        self.knee = max(1, lead_knee_rows(p.block_n, sms, p.intermediate))
        self.lead = lead if lead is not None else self.knee
        self.schedules = {"expert_wave": make_moe_schedule("expert_wave", lay.grid, sms),
                          "interleaved": make_moe_schedule("interleaved", lay.grid, sms, lead_rows=self.lead)}
        if dev == "cpu":  # the interpreter runs programs one by one: one program, dependencies first
            self.schedules = {k: sequential_schedule(s) for k, s in self.schedules.items()}
        self.dev = {k: M.DeviceLayout(lay, s.to_arrays(), dev) for k, s in self.schedules.items()}
        self.combine = {True: combine if combine is not None else M.Combine(lay, dev, remote=True),
                        False: M.Combine(lay, dev, remote=False)}
        valid = np.flatnonzero(lay.valid)
        self.valid_idx = torch.as_tensor(valid, device=dev)
        self.packed_rank = torch.as_tensor(lay.dest_rank[valid], device=dev)
        self.packed_row = torch.as_tensor(lay.dest_row[valid], device=dev)
        self.packed_weight = torch.as_tensor(lay.weight[valid], device=dev)
        self.xp = self.x.index_select(0, self.valid_idx)
        self.offs = torch.as_tensor(np.cumsum(lay.tokens_per_expert), dtype=torch.int32, device=dev)

    def run(self, schedule: str, remote: bool, kw: dict, **extra):
        if self.w8a8:
            Q.launch_moe_w8a8(self.xq, self.sx, self.wq, self.act_q, self.sact, self.dev[schedule],
                              self.combine[remote], **kw, **extra)
        else:
            M.launch_moe(self.x, self.w1_packed, self.w2, self.act, self.dev[schedule], self.combine[remote], **kw,
                         **extra)

    def reference(self):
        if self.w8a8:
            return Q.reference_w8a8(self.xq, self.sx, self.wq, self.layout)
        return M.reference_moe(self.x, self.w1, self.w2, self.layout)


def lead_schedule(s: Setup, lead: int) -> tuple:
    """(schedule, DeviceLayout) of the interleaved order with lead ``lead`` for ``s`` (sequential on the CPU)."""
    sched = make_moe_schedule("interleaved", s.layout.grid, s.sms, lead_rows=lead)
    if device() == "cpu":
        sched = sequential_schedule(sched)
    return sched, M.DeviceLayout(s.layout, sched.to_arrays(), device())


def tune_lead(s: Setup, kw: dict, dry: bool, trials: int = 10, pick=None) -> dict:
    """Pick the interleaved lead D among D_knee x {1, 2, 4, 8} (capped at the rows) by the time with
    local stores (starvation is a compute-side effect, Eq. 16); installs it in ``s``. {D: us}.

    ``pick({D: us}) -> D`` chooses (default: the fastest; the W-rank path agrees on one D over ranks)."""
    from xstage.hw.attention.bench import time_variants

    rows = s.layout.grid.rows
    leads = sorted({min(max(1, s.knee * f), max(1, rows - 1)) for f in (1, 2, 4, 8)})
    if dry:
        leads = leads[:2]
    built = {d: lead_schedule(s, d) for d in leads}

    def run(d):
        s.dev["interleaved"] = built[d][1]
        s.run("interleaved", False, kw)

    times, _ = time_variants({d: (lambda d=d: run(d)) for d in leads}, trials=trials,
                             **({"warmup": 0, "rounds": 1} if dry else {"warmup": 2, "rounds": 2}))
    med = {int(d): float(np.median(t)) for d, t in times.items()}
    best = pick(med) if pick is not None else min(med, key=med.get)
    s.lead, (s.schedules["interleaved"], s.dev["interleaved"]) = best, built.get(best) or lead_schedule(s, best)
    print(f"  lead D (knee {s.knee}): " + ", ".join(f"{d}: {t:.0f} us" for d, t in med.items()) + f" -> {best}",
          file=sys.stderr)
    return med


# --- the user's baseline: grouped GEMMs + SwiGLU, then a separate Combine -----------------------
def grouped_mm_fn(s: Setup):
    """(gemm(a, w) over experts, name): torch._grouped_mm when it runs here, else a matmul loop."""
    import torch

    counts = s.layout.tokens_per_expert
    bounds = np.concatenate([[0], np.cumsum(counts)])

    def loop(a, w):  # w: [E, N, K]
        return torch.cat([a[bounds[e]:bounds[e + 1]] @ w[e].T for e in range(len(counts))])

    if device() == "cuda" and hasattr(torch, "_grouped_mm"):
        try:
            def gmm(a, w):
                return torch._grouped_mm(a, w.transpose(-2, -1), offs=s.offs)
            y = gmm(s.xp[:, :], s.w1)
            ref = loop(s.xp, s.w1)
            _sync()
            if float((y.float() - ref.float()).norm() / ref.float().norm()) < 1e-2:
                return gmm, "torch._grouped_mm"
            print("  torch._grouped_mm disagrees with matmul; using the loop", file=sys.stderr)
        except Exception as err:  # noqa: BLE001 - any failure: fall back and say so
            print(f"  torch._grouped_mm unavailable ({type(err).__name__}: {str(err)[:120]})", file=sys.stderr)
    return loop, "matmul_loop"


def scaled_grouped_mm_fns(s: Setup):
    """The W8A8 user's baseline, or None where it does not run: ``torch._scaled_grouped_mm`` (fp8 e4m3,
    row-wise activation scales, per-channel weight scales — the kernel's quantization) for Linear-1,
    SwiGLU and a row-wise fp8 quantization of the activations, then Linear-2 and the router weights.
    Returns ({"grouped_mm": the two GEMMs on fixed fp8 inputs}, the whole FFN, name); checked against
    the same math in float32 first."""
    import torch

    if device() != "cuda" or not hasattr(torch, "_scaled_grouped_mm"):
        return None
    xq = s.xq.index_select(0, s.valid_idx)
    sx = s.sx.index_select(0, s.valid_idx).contiguous()
    w1t, w2t = s.wq.w1_q.transpose(-2, -1), s.wq.w2_q.transpose(-2, -1)  # (E, K, N) column-major views

    def gemm(a, sa, wt, sw):
        return torch._scaled_grouped_mm(a, wt, sa, sw, offs=s.offs, out_dtype=torch.bfloat16)

    def ffn():
        h = gemm(xq, sx, w1t, s.wq.sw1)
        act_q, sact = Q.quantize_rows(torch.nn.functional.silu(h[:, 0::2].float()) * h[:, 1::2].float())
        return gemm(act_q, sact, w2t, s.wq.sw2) * s.packed_weight[:, None]

    try:
        h = gemm(xq, sx, w1t, s.wq.sw1)
        ref = torch.cat([(xq[a:b].float() * sx[a:b, None]) @ (s.wq.w1_q[e].float() * s.wq.sw1[e, :, None]).T
                         for e, (a, b) in enumerate(zip([0, *s.offs.tolist()[:-1]], s.offs.tolist()))])
        _sync()
        err = float((h.float() - ref).norm() / ref.norm())
        if err > 2e-2:
            print(f"  torch._scaled_grouped_mm disagrees with float32 (rel err {err:.3g}); no fp8 baseline",
                  file=sys.stderr)
            return None
        act_q, sact = Q.quantize_rows(torch.nn.functional.silu(h[:, 0::2].float()) * h[:, 1::2].float())
        ffn()
        _sync()
    except Exception as err:  # noqa: BLE001 - any failure: no fp8 baseline, and say so
        print(f"  torch._scaled_grouped_mm unavailable ({type(err).__name__}: {str(err)[:160]})", file=sys.stderr)
        return None
    del ref
    return (lambda: (gemm(xq, sx, w1t, s.wq.sw1), gemm(act_q, sact, w2t, s.wq.sw2))), ffn, "torch._scaled_grouped_mm"


def baseline_ffn(s: Setup, gemm):
    import torch

    I = s.problem.intermediate
    h = gemm(s.xp, s.w1)
    a = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
    return (gemm(a, s.w2).float() * s.packed_weight[:, None]).to(s.x.dtype)


# --- correctness -------------------------------------------------------------------------------
def check_problem(problem: MoeProblem, sms: int, kw: dict, seed: int) -> list:
    import torch

    s = Setup(problem, sms, seed)
    ref = s.reference()
    p = problem
    rows = []
    count = torch.zeros((p.world_size, p.combine_rows, p.hidden // p.block_n), dtype=torch.int32, device=device())
    for sched in R.SCHEDULES:
        for remote in (True, False):
            comb = s.combine[remote]
            comb.poison()
            count.zero_()
            s.dev[sched].error.zero_()
            s.run(sched, remote, kw, write_count=count)
            _sync()
            res = comb.check(ref)
            valid = torch.as_tensor(s.layout.valid, device=device())
            c = count.flatten()
            written = int((c > 0).sum())
            once = bool((c <= 1).all()) and written == int(valid.sum()) * (p.hidden // p.block_n)
            err = int(s.dev[sched].error.item())
            rows.append({"config": p.label(), "variant": sched + ("" if remote else "_local"), **res,
                         "written_once": once, "error_flag": err, "lead_rows": s.lead,
                         "ok": res["ok"] and once and err == 0})
    if s.w8a8:
        return rows
    gemm, name = grouped_mm_fn(s)
    y = baseline_ffn(s, gemm)
    comb = s.combine[True]
    comb.poison()
    M.launch_combine_copy(y, s.packed_rank, s.packed_row, comb, block_n=p.block_n)
    _sync()
    rows.append({"config": p.label(), "variant": f"baseline_{name}+combine_copy", **comb.check(ref)})
    return rows


def check_deadlock_bails(problem: MoeProblem, sms: int, kw: dict) -> dict:
    """A D = 0 interleaved schedule deadlocks by construction: the bounded spin must set the flag."""
    s = Setup(problem, sms, seed=3)
    sched = make_moe_schedule("interleaved", s.layout.grid, sms, lead_rows=0)
    dev = M.DeviceLayout(s.layout, sched.to_arrays(), device())
    t0 = time.time()
    M.launch_moe(s.x, s.w1_packed, s.w2, s.act, dev, s.combine[False], **kw, spin_limit=2000)
    _sync()
    flag = int(dev.error.item())
    return {"config": problem.label(), "variant": "lead0_bails", "error_flag": flag, "wall_s": time.time() - t0,
            "ok": flag == 1}


# --- timing ------------------------------------------------------------------------------------
def measure(problem: MoeProblem, sms: int, kw: dict, trials: int, dry: bool, platform=None,
            platform_src: str = "") -> tuple:
    from xstage.hw.attention.bench import time_variants

    s = Setup(problem, sms, seed=problem.seed + 11)
    lead_us = tune_lead(s, kw, dry)
    fns, gname = variant_fns(s, kw)
    checks = []
    ref = s.reference()
    kws = {"": kw, **({f"_{'tma' if not kw['tma'] else 'ptr'}": {**kw, "tma": not kw["tma"]}} if "tma" in kw else {})}
    for tag, k in kws.items():  # what is timed is correct (poisoned Combine, fresh routing)
        for sched in R.SCHEDULES:
            s.combine[True].poison()
            s.dev[sched].error.zero_()
            s.run(sched, True, k)
            _sync()
            checks.append({"config": problem.label(), "variant": f"{sched}{tag}_timed", **s.combine[True].check(ref),
                           "error_flag": int(s.dev[sched].error.item())})
            checks[-1]["ok"] = checks[-1]["ok"] and checks[-1]["error_flag"] == 0
    del ref
    opts = {"warmup": 0, "rounds": 1} if dry else {"warmup": 3, "rounds": 4}
    times, modes = time_variants(fns, trials=trials, **opts)
    rows, copy_GBps = kernel_rows(s, kw, times, modes, lead_us, baseline=gname)
    # instrumented launches: tile records, then the simulator on the local-store medians
    tiles, timings = tile_records(s, kw)
    sim = predict(s, timings, platform, platform_src, copy_GBps)
    for r in rows:
        r.update(sim)
    return rows, tiles, checks


def variant_fns(s: Setup, kw: dict, alt_loads: bool = True) -> tuple:
    """({variant: fn} of one configuration, the grouped-GEMM baseline's name or None): both schedules with
    remote stores (``s.combine[True]``) and local, the other load path too (``alt_loads``, when ``kw`` names
    one), the grouped-GEMM baseline (bf16) and the separate Combine copy to the remote destinations."""
    import torch

    problem = s.problem
    fns = {}
    for sched in R.SCHEDULES:
        fns[sched] = lambda sc=sched: s.run(sc, True, kw)
        fns[f"{sched}_local"] = lambda sc=sched: s.run(sc, False, kw)
    if alt_loads and "tma" in kw:  # the other load path too: do TMA loads keep flowing behind backpressured stores?
        alt = {**kw, "tma": not kw["tma"]}
        tag = "tma" if alt["tma"] else "ptr"
        for sched in R.SCHEDULES:
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
    fns["combine_copy"] = lambda: M.launch_combine_copy(a_fixed, s.packed_rank, s.packed_row, s.combine[True],
                                                          block_n=problem.block_n)
    return fns, gname


def same_orders(s: Setup) -> bool:
    """True when ``s``'s interleaved order is its expert-wave order, tile for tile (the same launch twice:
    no winner to predict); from the schedules actually run (``moe_records.schedules_identical`` rebuilds
    them for records that lack the column)."""
    return R.same_order(*(s.schedules[k] for k in R.SCHEDULES))


def kernel_rows(s: Setup, kw: dict, times: dict, modes: dict, lead_us: dict, **columns) -> tuple:
    """Kernel records of one configuration's timed variants (plus ``baseline_total`` = baseline_ffn +
    combine_copy), with ``columns`` added to every row; and the Combine copy's rate (GB/s, remote bytes)."""
    errors = {k: int(d.error.item()) for k, d in s.dev.items()}
    bytes_ = s.layout.combine_bytes()
    extra = {"lead_rows": s.lead, "lead_knee_rows": s.knee, "lead_tune_us": json.dumps(lead_us), "num_sms": s.sms,
             "wave_experts": s.schedules["expert_wave"].params["wave_experts"][0], "rows": s.layout.grid.rows,
             "schedules_identical": same_orders(s),
             **bytes_, **{f"kernel_{k}": v for k, v in kw.items()}, **columns}
    rows = [R.kernel_row(s.problem, name, t, timing=modes[name], **extra) for name, t in times.items()]
    if "baseline_ffn" in times:
        total = np.asarray(times["baseline_ffn"]) + np.asarray(times["combine_copy"])
        rows.append(R.kernel_row(s.problem, "baseline_total", total, timing="sum", **extra))
    copy_us = next(r["time(us)"] for r in rows if r["variant"] == "combine_copy")
    copy_GBps = bytes_["remote_bytes"] / copy_us / 1e3
    for r in rows:
        r["combine_copy_GBps"] = copy_GBps
        r["error_flag"] = errors.get(r["variant"].replace("_local", ""), 0)
    return rows, copy_GBps


def tile_records(s: Setup, kw: dict, remotes=(True, False)) -> tuple:
    """One instrumented launch per (schedule, remote): (tile frames, {schedule: local-store medians}).
    GPU only (the interpreter cannot run the %globaltimer asm): ([], {}) elsewhere."""
    tiles, timings = [], {}
    if device() != "cuda":
        return tiles, timings
    import torch

    for sched in R.SCHEDULES:
        for remote in remotes:
            log = torch.zeros((len(s.dev[sched].tiles_np), 8), dtype=torch.int64, device="cuda")
            s.run(sched, remote, kw, tile_log=log)
            _sync()
            f = R.tile_frame(s.layout, s.dev[sched].tiles_np, log.cpu().numpy(), schedule=sched, remote=remote)
            tiles.append(f)
            if not remote:
                timings[sched] = R.tile_timings(f)
    return tiles, timings


def predict(s: Setup, timings: dict, platform, platform_src: str, copy_GBps: float) -> dict:
    """The simulator's makespans of both schedules from the measured local-store medians (``sim_*`` columns,
    NaN without timings); ``platform`` None: paper-b200 scaled to this GPU with R = the Combine copy rate."""
    sim = {"sim_wave(us)": math.nan, "sim_int(us)": math.nan, "sim_platform": platform_src or None}
    if not timings:
        return sim
    t = {k: float(np.mean([timings[sc][k] for sc in R.SCHEDULES])) for k in timings["expert_wave"]}
    plat = platform
    try:
        if plat is None:
            plat = R.scaled_b200(s.sms, copy_GBps)
            sim["sim_platform"] = f"paper-b200 scaled ({s.sms} SMs, R = combine copy {copy_GBps:.1f} GB/s)"
        for tag, p, coupled in (("", plat, False), ("coupled_", plat, True)):
            sim[f"sim_{tag}wave(us)"] = R.simulate(s.layout, s.schedules["expert_wave"], t, p, coupled=coupled)
            sim[f"sim_{tag}int(us)"] = R.simulate(s.layout, s.schedules["interleaved"], t, p, coupled=coupled)
        if platform is not None and copy_GBps > 0:  # the same platform with R = the measured Combine copy rate
            from dataclasses import replace

            alt = replace(plat, drain_rate_GBps=float(copy_GBps))
            sim["sim_copyR_wave(us)"] = R.simulate(s.layout, s.schedules["expert_wave"], t, alt)
            sim["sim_copyR_int(us)"] = R.simulate(s.layout, s.schedules["interleaved"], t, alt)
    except Exception as err:  # noqa: BLE001 - the measurement stands without the prediction
        print(f"  simulator failed: {type(err).__name__}: {err}", file=sys.stderr)
    sim.update({f"measured_{k}": v for k, v in t.items()})
    return sim


def save(out_dir: Path, rows: list, tiles: list, checks: list, meta: dict, overwrite: bool) -> list:
    paths = [save_records(out_dir / "moe-kernel.parquet", "kernel", pd.DataFrame(rows), meta, overwrite=overwrite)]
    if tiles:
        frame = pd.concat(tiles, ignore_index=True)
        paths.append(save_records(out_dir / "moe-tile.parquet", "tile", frame, meta, overwrite=overwrite))
        # a copy small enough to commit (< 2 MiB): the first two configurations, float32 times
        small = frame[frame["config"].isin(frame["config"].drop_duplicates().iloc[:2])].copy()
        for col in small.columns:
            if small[col].dtype == "float64":
                small[col] = small[col].astype("float32")
        paths.append(save_records(out_dir / "moe-tile-small.parquet", "tile", small, meta, overwrite=overwrite))
    paths.append(atomic_write_text(out_dir / "moe-checks.json", json.dumps(checks, indent=1, default=str),
                                   overwrite=overwrite))
    return paths


def tune(sms: int, trials: int = 8, precision: str = "bf16") -> tuple:
    """Pick the kernel options (``TUNE_KEYS`` / ``TUNE_KEYS_W8A8``) by the interleaved local-store time on
    one mid shape of ``precision``; a candidate that does not compile (e.g. too much shared memory) is skipped."""
    from xstage.hw.attention.bench import time_variants

    keys, cands = (TUNE_KEYS, TUNE) if precision == "bf16" else (TUNE_KEYS_W8A8, TUNE_W8A8)
    s = Setup(MoeProblem(7168, 2048, 8192, routing="balanced", precision=precision), sms, seed=5)
    fns = {c: (lambda c=c: s.run("interleaved", False, dict(zip(keys, c)))) for c in cands}
    ok = {}
    for c, fn in fns.items():
        try:
            fn()
            _sync()
            ok[c] = fn
        except Exception as err:  # noqa: BLE001 - a config that does not compile is skipped
            print(f"  tune {precision} {c}: {type(err).__name__}: {str(err)[:100]}", file=sys.stderr)
    times, _ = time_variants(ok, trials=trials, warmup=2, rounds=2)
    med = {c: float(np.median(t)) for c, t in times.items()}
    for c, t in sorted(med.items(), key=lambda x: x[1]):
        print(f"  tune {precision} {', '.join(keys)} = {c}: {t:.0f} us", file=sys.stderr)
    best = min(med, key=med.get)
    return dict(zip(keys, best)), med


def main(argv=None) -> int:
    from xstage.cli.moe import run_parser  # the flags are declared once, with `xstage moe run`

    return run(run_parser("python -m xstage.hw.moe.bench").parse_args(argv))


def run(args) -> int:
    """The sweep for parsed ``xstage moe run`` flags."""
    t_start = time.time()
    out_dir = Path(args.out)
    if not args.overwrite and (out_dir / "moe-kernel.parquet").exists():
        raise InputError("--out", str(out_dir), "already holds moe records (pass --overwrite to replace them)")
    dry = args.dry_run
    sms = num_sms(dry)
    blocks = DRY if dry else {}
    kw = dict(DRY_KW_TMA) if dry else {"block_k": 64, "num_stages": 4, "num_warps": 8, "tma": False}
    kw8 = dict(DRY_KW) if dry else dict(W8A8_KW)
    if device() == "cuda":
        from xstage.hw.common.hostmap import check_mapping

        print("host mapping:", check_mapping(), file=sys.stderr)
    checks = []
    if not args.no_checks:
        try:
            for h, i, t, r, prec, *_ in (DRY_SWEEP if dry else CHECKS):
                if args.precision not in (None, prec):
                    continue
                checks += check_problem(MoeProblem(h, i, t, routing=r, seed=t, precision=prec, **blocks), sms,
                                        kw8 if prec == "w8a8" else kw, seed=t)
                print(f"  checks {h}/{i}/{t}/{r}/{prec}: " + ", ".join(f"{c['variant']}={'ok' if c['ok'] else 'FAIL'}"
                      for c in checks if c["config"] == checks[-1]["config"]), file=sys.stderr)
            if not dry and args.precision != "w8a8":
                checks.append(check_deadlock_bails(MoeProblem(2048, 512, 2000, **blocks), sms, kw))
                print(f"  D=0 bails: {checks[-1]}", file=sys.stderr)
        except Exception as err:  # noqa: BLE001 - report, then still measure
            traceback.print_exc()
            checks.append({"variant": "checks", "ok": False, "error": f"{type(err).__name__}: {err}"})
    failed = [c for c in checks if not c.get("ok")]
    print(f"  checks: {len(checks) - len(failed)}/{len(checks)} ok ({time.time() - t_start:.0f}s)", file=sys.stderr)
    tune_med = {}
    for prec in ("bf16", "w8a8") if not dry and not args.no_tune else ():
        if args.precision in (None, prec):
            try:
                best, med = tune(sms, precision=prec)
                kw, kw8 = (best, kw8) if prec == "bf16" else (kw, best)
                tune_med.update({(prec, *c): t for c, t in med.items()})
            except Exception:  # noqa: BLE001 - keep the defaults
                traceback.print_exc()
    platform, platform_src = (None, "") if dry else R.find_platform(out_dir)
    print(f"  kernel {kw}; simulator platform: {platform_src} ({time.time() - t_start:.0f}s)", file=sys.stderr)
    rows, tiles = [], []
    sweep = [c for c in (DRY_SWEEP if dry else SWEEP) if args.precision in (None, c[4])]
    for h, i, t, r, prec, world in sweep[:args.max_configs]:
        if time.time() - t_start > args.budget_s:
            print(f"  budget reached: skipping {h}/{i}/{t}/{r}/{prec}/W{world}", file=sys.stderr)
            continue
        try:
            kr, tr, kc = measure(MoeProblem(h, i, t, routing=r, precision=prec, world_size=world, **blocks), sms,
                                 kw8 if prec == "w8a8" else kw, args.trials, dry, platform, platform_src)
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
        print(f"  {kr[0]['config']}: wave {by['expert_wave']['time(us)']:.0f} int {by['interleaved']['time(us)']:.0f}"
              f" local {by['expert_wave_local']['time(us)']:.0f}/{by['interleaved_local']['time(us)']:.0f}"
              f" grouped_mm {gm:.0f} copy {by['combine_copy']['time(us)']:.0f} us;"
              f" sim {kr[0]['sim_wave(us)']:.0f}/{kr[0]['sim_int(us)']:.0f} ({time.time() - t_start:.0f}s)",
              file=sys.stderr)
    tune_us = {str(k): v for k, v in tune_med.items()}
    meta = {"config": {"args": vars(args), "kernel": kw, "kernel_w8a8": kw8, "num_sms": sms, "tune_us": tune_us,
                       "sim_platform": platform_src, "sweep": sweep},
            "provenance": provenance(with_gpu=device() == "cuda")}
    if rows:
        out_dir.mkdir(parents=True, exist_ok=True)
        for path in save(out_dir, rows, tiles, checks, meta, args.overwrite):
            print(f"wrote {path}", file=sys.stderr)
        table = R.per_config(pd.DataFrame(rows))
        cols = [c for c in ("config", "expert_wave(us)", "interleaved(us)", "speedup_interleaved",
                            "expert_wave_local(us)", "interleaved_local(us)", "grouped_mm(us)", "gemm_vs_grouped_mm",
                            "baseline_total(us)", "sim_speedup") if c in table]
        with pd.option_context("display.width", 250, "display.max_columns", 20):
            print(table[cols].round(3).to_string(index=False))
        summary = R.summarize(out_dir)
        print(json.dumps(summary, indent=1, default=str))
    else:
        atomic_write_text(out_dir / "moe-checks.json", json.dumps(checks, indent=1, default=str), overwrite=True)
    print(f"moe_bench: {len(failed)} failed checks, {time.time() - t_start:.0f}s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    from xstage.errors import exit_with

    exit_with(main, "moe_bench")
