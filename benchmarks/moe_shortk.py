"""Re-measure the sweep's short-K bf16 configurations (I <= 1024) with their full tile logs and a pairing.

Run 0511e80 left three bf16 configurations under 0.9x ``torch._grouped_mm`` (h7168 / I512, Qwen3.5-S
skewed), and its full tile log (24.8 MB) was too large to come back from the device. This re-measures the
sweep's configurations with I <= ``bench.SHORT_K_MAX`` (1536 since small-tune-3a1632c) at the configuration the sweep now gives them
(``bench.config_tiles``: ``BF16_SHORT_K``, two programs per SM, BLOCK_N 128, 8 rows side by side)
through ``bench.measure`` — the same checks, variants, baselines and tile logs — and adds a paired
comparison on the same inputs: expert-wave with remote stores off at that configuration and at the one
before it (BLOCK_N 256, one program per SM, ``bench.BF16_FAST``): variants ``expert_wave_local_short_k``
/ ``expert_wave_local_one_per_sm``, and BLOCK_N 128 at one program per SM (``_bn128_one_per_sm``: which of
the two changes gains). Records go to ``--out`` as a run of their own (``save_run``).
(``data/moe/run-4e67eac-shortk`` was written by this script's earlier form: the sweep's one-per-SM
configuration, paired at 3 and 4 stages.)

    python3 benchmarks/moe_shortk.py --out $OUT/moe-shortk [--only LABEL,...]
"""

import json
import sys
import time
from pathlib import Path


def configs(only: str = ""):
    """The sweep's bf16 configurations with I <= ``bench.SHORT_K_MAX``; only those labelled in ``only`` (a
    comma-separated list of ``MoeProblem.label()``) when it names any."""
    from xstage.hw.moe.bench import SHORT_K_MAX, SWEEP
    from xstage.sim.workloads.moe_layout import MoeProblem

    want = {x for x in only.split(",") if x}
    return [c for c in SWEEP if c[2] <= SHORT_K_MAX and c[5] == "bf16" and (not want or MoeProblem(
        *c[1:4], routing=c[4], precision=c[5], world_size=c[6], local_experts=c[7]).label() in want)]


def main() -> int:
    from moe_tune import run_args

    args = run_args(__doc__, 25, 90.0, only=True)
    import numpy as np

    from xstage.hw.common.timing import time_variants
    from xstage.hw.moe import bench as B
    from xstage.hw.moe.setup import num_sms
    from xstage.provenance import provenance
    from xstage.records.moe import kernel_row, save_run
    from xstage.sim.workloads.moe_layout import MoeProblem
    from moe_shortk_tune import local_setup

    t0 = time.time()
    sms = num_sms(False)
    rows, tiles, checks = [], [], []
    for model, h, i, t, r, prec, world, experts in configs(args.only):
        if time.time() - t0 > args.budget_s:
            print(f"budget reached: skip {model} {h}/{i}/{t}/{r}", flush=True)
            continue
        blocks, pps, kw = B.config_tiles(prec, i, dict(B.BF16_FAST), dict(B.W8A8_FAST), False)
        p = MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world, **blocks)
        kr, tr, kc = B.measure(p, sms * pps, kw, args.trials, False,
                               group_rows=B.config_group_rows(prec, i, B.GROUP_ROWS), model=model,
                               programs_per_sm=pps)
        old = MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world,
                         block_n=B.BLOCK_N)
        pairs = {"short_k": (p, sms * pps, kw), "one_per_sm": (old, sms, dict(B.BF16_FAST)),
                 "bn128_one_per_sm": (p, sms, dict(B.BF16_FAST))}
        setups = {k: local_setup(q, n, seed=p.seed + 11) for k, (q, n, _) in pairs.items()}
        fns = {f"expert_wave_local_{k}": (lambda k=k: setups[k].run("expert_wave", False, pairs[k][2]))
               for k in pairs}
        times, modes = time_variants(fns, trials=args.trials, warmup=3, rounds=4)
        extra = {k: v for k, v in kr[0].items() if k in ("model", "group_rows")}
        for name, ts in times.items():
            q, n, used = pairs[name.removeprefix("expert_wave_local_")]
            rows.append(kernel_row(q, name, ts, timing=modes[name], **extra, num_sms=n,
                                   programs_per_sm=n // sms, **{f"kernel_{k}": v for k, v in used.items()}))
        setups.clear()
        rows += kr
        tiles += tr
        checks += kc
        by = {x["variant"]: x["time(us)"] for x in kr}
        med = {k: float(np.median(v)) for k, v in times.items()}
        print(f"{p.label()}: local {by['expert_wave_local']:.0f}/{by['interleaved_local']:.0f} grouped_mm "
              f"{by['grouped_mm']:.0f} us (x{by['grouped_mm'] / min(by['expert_wave_local'], by['interleaved_local']):.3f});"
              f" paired short_k {med['expert_wave_local_short_k']:.0f} one_per_sm "
              f"{med['expert_wave_local_one_per_sm']:.0f} bn128_one_per_sm {med['expert_wave_local_bn128_one_per_sm']:.0f}"
              f" us [{time.time() - t0:.0f}s]", flush=True)
    meta = {"config": {"args": vars(args), "kernel": B.BF16_SHORT_K, "num_sms": sms,
                       "short_k_max_intermediate": B.SHORT_K_MAX, "paired_with": B.BF16_FAST,
                       "group_rows": B.GROUP_ROWS, "sweep": configs(args.only)},
            "provenance": provenance(with_gpu=True)}
    for path in save_run(Path(args.out), rows, tiles, checks, meta, True):
        print(f"wrote {path}", flush=True)
    bad = [c for c in checks if not c.get("ok")]
    print(json.dumps({"configs": len({r['config'] for r in rows}), "checks": len(checks), "failed": len(bad)}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
