"""Re-measure the short-K configurations of run-0511e80 with their full tile logs and a 4-stage pairing.

Run 0511e80 left three bf16 configurations under 0.9x ``torch._grouped_mm`` (h7168 / I512, Qwen3.5-S
skewed), and its full tile log (24.8 MB) was too large to come back from the device. This re-measures the
sweep's configurations with I <= 1024 at the sweep's kernel configuration (``bench.BF16_FAST``, BLOCK_N
256, 8 rows side by side) through ``bench.measure`` — the same checks, variants, baselines and tile logs
— and adds a paired comparison on the same inputs: expert-wave with remote stores off at 3 and at 4
stages (variants ``expert_wave_local_st3`` / ``expert_wave_local_st4``; the tuner saw 4 stages gain 3 %
at h2048 / I512). Records go to ``--out`` as a run of their own (``save_run``).

    python3 benchmarks/moe_shortk.py --out $OUT/moe-shortk
"""

import argparse
import json
import sys
import time
from pathlib import Path


def configs():
    from xstage.hw.moe.bench import SWEEP

    return [c for c in SWEEP if c[2] <= 1024 and c[5] == "bf16"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--trials", type=int, default=25)
    ap.add_argument("--budget-s", type=float, default=90.0)
    args = ap.parse_args()
    import numpy as np

    from xstage.hw.common.timing import time_variants
    from xstage.hw.moe import bench as B
    from xstage.hw.moe.setup import Setup, num_sms
    from xstage.provenance import provenance
    from xstage.records.moe import kernel_row, save_run
    from xstage.sim.workloads.moe_layout import MoeProblem

    t0 = time.time()
    sms = num_sms(False)
    kw = dict(B.BF16_FAST)
    rows, tiles, checks = [], [], []
    for model, h, i, t, r, prec, world, experts in configs():
        if time.time() - t0 > args.budget_s:
            print(f"budget reached: skip {model} {h}/{i}/{t}/{r}", flush=True)
            continue
        p = MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world,
                       block_n=B.BLOCK_N)
        kr, tr, kc = B.measure(p, sms, kw, args.trials, False, group_rows=B.GROUP_ROWS, model=model)
        s = Setup(p, sms, seed=p.seed + 11, group_rows=B.GROUP_ROWS)
        pair = {f"expert_wave_local_st{n}": (lambda n=n: s.run("expert_wave", False, {**kw, "num_stages": n}))
                for n in (3, 4)}
        times, modes = time_variants(pair, trials=args.trials, warmup=3, rounds=4)
        extra = {k: v for k, v in kr[0].items() if k in ("model", "group_rows", "num_sms", "lead_rows", "rows")}
        for name, ts in times.items():
            used = {**kw, "num_stages": int(name[-1])}
            rows.append(kernel_row(p, name, ts, timing=modes[name], **extra,
                                   **{f"kernel_{k}": v for k, v in used.items()}))
        rows += kr
        tiles += tr
        checks += kc
        by = {x["variant"]: x["time(us)"] for x in kr}
        med = {k: float(np.median(v)) for k, v in times.items()}
        print(f"{p.label()}: local {by['expert_wave_local']:.0f}/{by['interleaved_local']:.0f} grouped_mm "
              f"{by['grouped_mm']:.0f} us; paired st3 {med['expert_wave_local_st3']:.0f} st4 "
              f"{med['expert_wave_local_st4']:.0f} us [{time.time() - t0:.0f}s]", flush=True)
    meta = {"config": {"args": vars(args), "kernel": kw, "num_sms": sms, "block_n": B.BLOCK_N,
                       "group_rows": B.GROUP_ROWS, "sweep": configs()},
            "provenance": provenance(with_gpu=True)}
    for path in save_run(Path(args.out), rows, tiles, checks, meta, True):
        print(f"wrote {path}", flush=True)
    bad = [c for c in checks if not c.get("ok")]
    print(json.dumps({"configs": len({r['config'] for r in rows}), "checks": len(checks), "failed": len(bad)}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
