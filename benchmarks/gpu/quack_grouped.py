"""quack's grouped GEMM beside ``torch._grouped_mm`` on the MoE sweep's bf16 configurations (issue 17).

The fused kernel's GEMM rate is judged against the faster grouped-GEMM library a user could pick. This
times both libraries' two expert GEMMs (Linear-1 ``x W1^T`` over the packed gate/up rows, Linear-2
``act W2^T``) on the very inputs ``hw/moe/bench.py`` builds for its ``grouped_mm`` variant (same Setup,
seed and routing), after checking quack's outputs against ``torch._grouped_mm``'s (relative Frobenius
error < 1e-2; a configuration that fails is recorded and not timed). quack-kernels'
``quack.gemm_interface.gemm`` takes variable-length M per expert (``cu_seqlens_m``) and B as (E, K, N).

    python3 benchmarks/gpu/quack_grouped.py --out $OUT/quack.json [--tuned] [--budget-s 200] [--only LABEL,...]

Writes one JSON file: provenance, and per configuration the two libraries' median times (us), TFLOP/s
and which is faster. ``benchmarks/moe_library_rate.py`` joins it with the committed kernel records.
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tuned", action="store_true", help="quack's autotuner (slower to start)")
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--only", default="", help="comma-separated configuration labels (MoeProblem.label()) to time")
    args = ap.parse_args()
    only = {x for x in args.only.split(",") if x}
    import numpy as np
    import torch
    from quack.gemm_interface import gemm as quack_gemm

    from xstage.hw.common.timing import time_variants
    from xstage.hw.moe.baseline import grouped_mm_fn
    from xstage.hw.moe.bench import SWEEP
    from xstage.hw.moe.setup import Setup, num_sms
    from xstage.provenance import provenance
    from xstage.sim.workloads.moe_layout import MoeProblem

    t0 = time.time()
    sms = num_sms(False)
    rows = []
    for model, h, i, t, r, prec, world, experts in [c for c in SWEEP if c[5] == "bf16"]:
        if time.time() - t0 > args.budget_s:
            print(f"budget reached: skipping {model} {h}/{i}/{t}/{r}", flush=True)
            continue
        p = MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world)
        if only and p.label() not in only:
            continue
        row = {"config": p.label(), "model": model, "hidden": h, "intermediate": i, "tokens": t,
               "routing": r, "local_experts": experts, "tuned": args.tuned}
        try:
            s = Setup(p, sms, seed=p.seed + 11)
            gemm, gname = grouped_mm_fn(s)
            n_rows = int(s.xp.shape[0])
            act = torch.randn((n_rows, i), device="cuda", generator=torch.Generator("cuda").manual_seed(5)) \
                .to(torch.bfloat16)
            cu = torch.cat([torch.zeros(1, dtype=torch.int32, device="cuda"), s.offs.to(torch.int32)])
            w1t, w2t = s.w1.transpose(-2, -1), s.w2.transpose(-2, -1)   # (E, K, N), k-major views

            def q1():
                return quack_gemm(s.xp, w1t, cu_seqlens_m=cu, tuned=args.tuned)

            def q2():
                return quack_gemm(act, w2t, cu_seqlens_m=cu, tuned=args.tuned)

            errs = []
            for mine, ref in ((q1(), gemm(s.xp, s.w1)), (q2(), gemm(act, s.w2))):
                errs.append(float((mine.float() - ref.float()).norm() / ref.float().norm()))
            row["rel_err_vs_torch"] = max(errs)
            if not all(e < 1e-2 for e in errs):
                row["ok"] = False
                rows.append(row)
                print(f"{p.label()}: quack disagrees with {gname} (rel err {errs})", flush=True)
                continue
            times, modes = time_variants({"torch": lambda: (gemm(s.xp, s.w1), gemm(act, s.w2)),
                                          "quack": lambda: (q1(), q2())}, trials=args.trials, warmup=3, rounds=4)
            flops = 2.0 * n_rows * (h * 2 * i + i * h)
            for name in ("torch", "quack"):
                us = float(np.median(times[name]))
                row[f"{name}(us)"], row[f"{name}(TFLOPs)"], row[f"{name}_timing"] = us, flops / us / 1e6, modes[name]
            row.update(ok=True, rows=n_rows, baseline_name=gname,
                       faster="quack" if row["quack(us)"] < row["torch(us)"] else "torch")
            print(f"{p.label()}: torch {row['torch(TFLOPs)']:.0f} quack {row['quack(TFLOPs)']:.0f} TFLOP/s "
                  f"({time.time() - t0:.0f}s)", flush=True)
            s = None  # free this configuration's tensors before the next
            torch.cuda.empty_cache()
        except Exception as err:  # noqa: BLE001 - record and go on to the next configuration
            row.update(ok=False, error=f"{type(err).__name__}: {str(err)[:300]}")
            print(f"{row['config']}: {row['error']}", flush=True)
        rows.append(row)
    import importlib.metadata as md
    out = {"provenance": provenance(with_gpu=True),
           "libraries": {n: md.version(n) for n in ("quack-kernels", "nvidia-cutlass-dsl", "torch")},
           "rows": [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in x.items()}
                    for x in rows]}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    ok = [x for x in rows if x.get("ok")]
    print(f"{len(ok)}/{len(rows)} configurations timed; quack faster on {sum(x['faster'] == 'quack' for x in ok)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
