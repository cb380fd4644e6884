"""Where the fused MoE FFN's GEMM loses to the grouped-GEMM library (issue 17), in one device call.

Per shape: ``torch._grouped_mm`` (bf16) or ``torch._scaled_grouped_mm`` (W8A8) on the same packed rows,
then the fused kernel with remote stores off over tile configurations: BLOCK_N (an L1 tile packs gate
and up, so BLOCK_N = 256 gives 128 intermediate columns), ``group_rows`` (the schedule's rows walked side
by side: weight columns stay in L2), BLOCK_K, stages, warps, TMA loads of the activations, warp
specialisation; and ``nowait``: the expert-wave order with every L2 tile's wait removed (l2_need = 0;
its output is not checked), which separates mainloop speed from dependency stalls. Every configuration
is checked against the float32 reference (poisoned Combine, error flag) before it is timed; one that
fails to compile or check is reported and skipped.

    python3 benchmarks/moe_tune.py --out $OUT/tune      # benchmarks/gpu/moe_tune.sh
    TRITON_INTERPRET=1 python benchmarks/moe_tune.py --dry-run --out /tmp/tune   # CPU, tiny shapes
Prints one line per point; writes ``tune.jsonl`` (one JSON object per point, provenance first).

Run on the H200 at 9a6f7ff (``data/moe/tune-9a6f7ff``, 46 s): the committed configuration (BLOCK_N 128,
row-major) 0.63-0.85x ``torch._grouped_mm``; 8 rows side by side 0.82-0.87x; with BLOCK_N 256 and TMA
activations 0.94-0.95x (0.99x with 4 stages at h2048 / I512); nowait within 2 % (no dependency stalls to
speak of); warp specialisation no change; W8A8 0.70 -> 0.90 / 0.92x ``torch._scaled_grouped_mm``.
"""

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

BF16_SHAPES = ((2048, 4096, 8192), (4096, 8192, 8192), (7168, 2048, 8192), (2048, 512, 4096))
W8A8_SHAPES = ((2048, 4096, 8192), (7168, 2048, 8192))
BASE = {"block_k": 64, "num_stages": 4, "num_warps": 8, "tma": True}
# (block_n, group_rows, kernel options): the committed configuration first
BF16_CANDS = [(128, 1, BASE), (128, 8, BASE), (256, 1, {**BASE, "num_stages": 3}),
              (256, 8, {**BASE, "num_stages": 3}), (256, 8, {**BASE, "num_stages": 3, "act_tma": True}),
              (256, 8, {**BASE, "num_stages": 4, "act_tma": True}), (256, 4, {**BASE, "num_stages": 3, "act_tma": True}),
              (256, 16, {**BASE, "num_stages": 3, "act_tma": True}),
              (256, 8, {**BASE, "block_k": 128, "num_stages": 2, "act_tma": True}),
              (256, 8, {**BASE, "num_stages": 3, "act_tma": True, "ws": True}),
              (128, 8, {**BASE, "act_tma": True}), (128, 8, {**BASE, "num_stages": 5, "act_tma": True})]
W8 = {"block_k": 128, "num_stages": 4, "num_warps": 8}
W8A8_CANDS = [(128, 1, W8), (128, 8, W8), (128, 8, {**W8, "tma": True, "act_tma": True}),
              (256, 8, {**W8, "num_stages": 3, "tma": True, "act_tma": True}),
              (256, 8, {**W8, "num_stages": 4, "tma": True, "act_tma": True}),
              (256, 8, {**W8, "num_stages": 3, "tma": True}), (256, 1, {**W8, "num_stages": 3, "tma": True, "act_tma": True}),
              (256, 8, {**W8, "num_stages": 3, "tma": True, "act_tma": True, "ws": True})]


DRY = {"bf16": ((64, 64, 90),), "w8a8": ((64, 64, 90),)}  # --dry-run: tiny shapes, interpreter, 16 x BN/4 tiles
DRY_KW = {"block_k": 16, "num_stages": 1, "num_warps": 4}


def nowait_layout(s):
    """The expert-wave arrays with l2_need = 0: no L2 tile waits (timing only: the output races)."""
    from xstage.hw.common.timing import device
    from xstage.hw.moe.buffers import DeviceLayout

    arrays = s.schedules["expert_wave"].to_arrays()
    tiles = np.array(arrays["tiles"], copy=True)
    tiles[:, 7] = 0
    return DeviceLayout(s.layout, {"tiles": tiles, "sm_offsets": arrays["sm_offsets"]}, device())


def library_fn(s):
    """(the two grouped GEMMs of the baseline on fixed inputs, name)."""
    from xstage.hw.moe.baseline import grouped_mm_fn, scaled_grouped_mm_fns

    if s.w8a8:
        got = scaled_grouped_mm_fns(s)
        return (got[0], got[2]) if got is not None else (None, None)
    gemm, name = grouped_mm_fn(s)
    act_fixed = (gemm(s.xp, s.w1)[:, :s.problem.intermediate] * 1).contiguous()
    return (lambda: (gemm(s.xp, s.w1), gemm(act_fixed, s.w2))), name


def check(s, kw) -> dict:
    """Both schedules into the poisoned local Combine against the float32 reference."""
    from xstage.hw.common.timing import sync

    out = {}
    ref = s.reference()
    for sched in ("expert_wave", "interleaved"):
        comb = s.combine[False]
        comb.poison()
        s.dev[sched].error.zero_()
        s.run(sched, False, kw)
        sync()
        r = comb.check(ref)
        out[sched] = {"ok": bool(r["ok"]) and int(s.dev[sched].error.item()) == 0, "rel_err": float(r["rel_err"]),
                      "unwritten": int(r["unwritten"])}
    return out


def point(shape, precision, bn, gm, kw, sms, lib_us, trials, dry=False) -> dict:
    from xstage.hw.common.timing import time_variants
    from xstage.hw.moe.setup import Setup
    from xstage.sim.workloads.moe_layout import MoeProblem

    h, i, t = shape
    blocks = {"block_m": 16, "block_n": bn // 8} if dry else {"block_n": bn}
    s = Setup(MoeProblem(h, i, t, precision=precision, **blocks), sms, seed=7, group_rows=gm)
    row = {"hidden": h, "intermediate": i, "tokens": t, "precision": precision, "block_n": bn, "group_rows": gm,
           **kw, "lead_rows": s.lead, "tiles": int(len(s.dev["expert_wave"].tiles_np))}
    t0 = time.time()
    row["check"] = check(s, kw)
    row["compile_check_s"] = time.time() - t0
    if not all(c["ok"] for c in row["check"].values()):
        return row
    nowait = nowait_layout(s)

    def run_nowait():
        saved = s.dev["expert_wave"]
        s.dev["expert_wave"] = nowait
        try:
            s.run("expert_wave", False, kw)
        finally:
            s.dev["expert_wave"] = saved

    fns = {"expert_wave_local": lambda: s.run("expert_wave", False, kw),
           "interleaved_local": lambda: s.run("interleaved", False, kw), "nowait": run_nowait}
    times, _ = time_variants(fns, trials=trials, warmup=2, rounds=2)
    med = {k: float(np.median(v)) for k, v in times.items()}
    row.update({f"{k}_us": v for k, v in med.items()})
    best = min(med["expert_wave_local"], med["interleaved_local"])
    row["flops"] = 6.0 * int(s.layout.valid.sum()) * h * i
    row["tflops"] = row["flops"] / best / 1e6
    row["vs_library"] = lib_us / best if lib_us else None
    row["nowait_vs_library"] = lib_us / med["nowait"] if lib_us else None
    return row


def run_args(doc: str, trials: int, budget_s: float, dry_run: bool = False, argv=None, only: bool = False):
    """The flags the MoE device scripts share (``--out``, ``--trials``, ``--budget-s``, ``--dry-run``, ``--only``),
    parsed; the description is the first line of the script's docstring ``doc``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--trials", type=int, default=trials)
    ap.add_argument("--budget-s", type=float, default=budget_s)
    if only:
        ap.add_argument("--only", default="", help="comma-separated configuration labels (MoeProblem.label())")
    if dry_run:
        ap.add_argument("--dry-run", action="store_true", help="tiny shapes under TRITON_INTERPRET=1 (CPU)")
    return ap.parse_args(argv)


def main() -> int:
    args = run_args(__doc__, 10, 300.0, dry_run=True)
    import torch

    from xstage.hw.common.timing import time_variants
    from xstage.hw.moe.setup import Setup, num_sms
    from xstage.provenance import provenance
    from xstage.sim.workloads.moe_layout import MoeProblem

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "tune.jsonl"
    dry = args.dry_run
    sms = num_sms(dry)
    t_start = time.time()
    with open(path, "w") as f:
        f.write(json.dumps({"provenance": provenance(with_gpu=not dry)}, default=str) + "\n")
        for precision, shapes, cands in (("bf16", BF16_SHAPES, BF16_CANDS), ("w8a8", W8A8_SHAPES, W8A8_CANDS)):
            if dry:
                shapes = DRY[precision]
                cands = [(bn, gm, {**DRY_KW, **{k: v for k, v in kw.items() if k in ("tma", "act_tma")}})
                         for bn, gm, kw in cands[:4]]
            for shape in shapes:
                s = Setup(MoeProblem(*shape, precision=precision, **({"block_m": 16, "block_n": 16} if dry else {})),
                          sms, seed=7)
                lib, name = library_fn(s)
                lib_us = None
                if lib is not None:
                    times, _ = time_variants({"lib": lib}, trials=args.trials, warmup=2, rounds=2)
                    lib_us = float(np.median(times["lib"]))
                f.write(json.dumps({"hidden": shape[0], "intermediate": shape[1], "tokens": shape[2],
                                    "precision": precision, "library": name, "library_us": lib_us}) + "\n")
                print(f"{precision} {shape}: {name} {lib_us} us", flush=True)
                del s
                for bn, gm, kw in cands:
                    if time.time() - t_start > args.budget_s:
                        print(f"budget reached: skip {precision} {shape} {bn} {gm} {kw}", flush=True)
                        continue
                    try:
                        row = point(shape, precision, bn, gm, kw, sms, lib_us, 2 if dry else args.trials, dry)
                    except Exception as err:  # noqa: BLE001 - a configuration that does not compile is reported
                        traceback.print_exc(limit=2)
                        row = {"hidden": shape[0], "intermediate": shape[1], "precision": precision, "block_n": bn,
                               "group_rows": gm, **kw, "error": f"{type(err).__name__}: {str(err)[:300]}"}
                    if torch.cuda.is_available():
                        torch.cuda.empty_cache()
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    ok = "error" not in row and all(c["ok"] for c in row.get("check", {}).values())
                    print(f"  {precision} {shape} BN{bn} GM{gm} {kw}: "
                          + (f"wave {row['expert_wave_local_us']:.0f} int {row['interleaved_local_us']:.0f} "
                             f"nowait {row['nowait_us']:.0f} us, {row['tflops']:.0f} TFLOP/s, "
                             f"x{row['vs_library'] or float('nan'):.3f} lib (nowait x{row['nowait_vs_library'] or float('nan'):.3f})"
                             if ok and "tflops" in row else f"FAILED {row.get('error') or row.get('check')}")
                          + f" [{time.time() - t_start:.0f}s]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
