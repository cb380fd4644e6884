"""The seven bf16 configurations under 0.9x the faster grouped-GEMM library, tuned at two programs per SM (issue 17).

After run-61f7365-dit, seven bf16 configurations were under 0.9x the faster library (quack, untuned):
DiT-MoE-M (0.818 / 0.820), DiT-MoE-S (0.856 / 0.862), h7168 / I512 (0.860 / 0.878), Qwen3.5-S skewed (0.898).
All seven run ``bench.BF16_SHORT_K`` (BLOCK 128 x 128, two programs per SM on a 264-program schedule). Their
committed tile logs say where the time goes: programs hold 3 to 5 tiles (Algorithm 1's cursors stride over the
pairs, so the first pairs take one more Linear-1 and one more Linear-2 tile), the hardware pairs programs on an
SM at random, so SMs hold 7 to 9 tiles (mean 7.6) and the makespan follows the fullest; and every tile pays
~3 us between mainloops, of which reading the next tile's fields and a Linear-2 tile's row destinations are
dependent global loads. Candidates (all keep the simulator's tile arrays and each program's order):

    now       BF16_SHORT_K as committed
    early-pf  + a Linear-2 tile's destinations loaded before its mainloop, the next tile's fields prefetched
    place     + each SM runs a heavy and a light program (``hw/moe/placement.py``, by %smid and slot)
    all       early-pf + place
    all-g16   all, 16 rows walked side by side (group_rows; information only, not in the pick)

Every point is checked first (both schedules into the poisoned local Combine, float32 reference, error flag),
``torch._grouped_mm`` and quack (untuned; ``--quack-tuned``: also autotuned) timed in the same process on the
same packed rows. Writes ``tune.jsonl`` (provenance first) and ``pick.json``: the kernel options of the
candidate (not all-g16) with the best geomean ratio over the configurations every candidate ran, for
``python -m xstage.hw.moe.bench --short-k-kernel pick.json``.

    python3 benchmarks/moe_place_tune.py --out $OUT/place-tune [--budget-s 100] [--quack-tuned]
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

R128 = {"block_k": 64, "num_stages": 3, "num_warps": 8, "tma": True, "act_tma": True, "maxnreg": 128}
EPF = {"early_rows": True, "prefetch": True}
CANDS = [("now", 128, 128, 2, R128, 8), ("early-pf", 128, 128, 2, {**R128, **EPF}, 8),
         ("place", 128, 128, 2, {**R128, "place": True}, 8), ("all", 128, 128, 2, {**R128, **EPF, "place": True}, 8),
         ("all-g16", 128, 128, 2, {**R128, **EPF, "place": True}, 16)]
PICKABLE = ("now", "early-pf", "place", "all")
WANT = [(1536, 1536, 6976, "balanced", 2), (1536, 1536, 6976, "skewed", 2), (1536, 1536, 3488, "balanced", 2),
        (1536, 1536, 3488, "skewed", 2), (7168, 512, 8192, "skewed", 8), (7168, 512, 8192, "balanced", 8),
        (4096, 1024, 17440, "skewed", 64)]


def configs():
    from xstage.hw.moe.bench import SWEEP

    pick = {(c[1], c[2], c[3], c[4], c[7]): c for c in SWEEP if c[5] == "bf16" and c[6] == 8}
    return [pick[w] for w in WANT]


def libraries(s, trials: int, tuned: bool) -> tuple:
    """({library: median us}, info): torch._grouped_mm, quack untuned and (``tuned``) autotuned, checked first."""
    from moe_tune import library_fn
    from xstage.hw.common.timing import time_variants
    from xstage.hw.moe.baseline import grouped_mm_fn, quack_grouped_fn

    lib, name = library_fn(s)
    fns, info = {"torch": lib}, {"torch_name": name}
    gemm, _ = grouped_mm_fn(s)
    act = (gemm(s.xp, s.w1)[:, :s.problem.intermediate] * 1).contiguous()
    for tag, t in (("quack", False), ("quack_tuned", True))[:2 if tuned else 1]:
        t0 = time.time()
        fn, rec = quack_grouped_fn(s, gemm, act, tuned=t)
        info[f"{tag}_check"] = {**rec, "first_call_s": time.time() - t0}
        if fn is not None:
            fns[tag] = fn
    times, _ = time_variants(fns, trials=trials, warmup=3, rounds=3)
    return {k: float(np.median(v)) for k, v in times.items()}, info


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=100.0)
    ap.add_argument("--quack-tuned", action="store_true")
    args = ap.parse_args()
    import torch

    from moe_shortk_tune import candidate_rows, local_setup
    from moe_small_tune import point
    from xstage.hw.moe.setup import num_sms
    from xstage.provenance import provenance
    from xstage.sim.workloads.moe_layout import MoeProblem

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sms = num_sms(False)
    t0 = time.time()
    rows = []
    with open(out / "tune.jsonl", "w") as f:
        f.write(json.dumps({"provenance": provenance(with_gpu=True), "cands": CANDS}, default=str) + "\n")
        for cfg in configs():
            model, h, i, t, r, prec, world, experts = cfg
            s = local_setup(MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world,
                                       block_n=128), sms, seed=7)
            lib, info = libraries(s, args.trials, args.quack_tuned)
            del s
            torch.cuda.empty_cache()
            best_lib = min(lib.values())
            print(f"{model} h{h}/i{i}/t{t}/{r}/e{experts}: " + " ".join(f"{k} {v:.0f} us" for k, v in lib.items()),
                  flush=True)
            extra = {"hidden": h, "intermediate": i, "tokens": t, "routing": r, "experts": experts,
                     **{f"library_{k}_us": v for k, v in lib.items()}, **info}

            def run_point(c):
                row = point(cfg, c, sms, lib, args.trials)
                if "best_us" in row:
                    row["vs_best_library"] = best_lib / row["best_us"]
                return row

            for cand, row in candidate_rows(cfg, CANDS, run_point, extra, f, t0, args.budget_s):
                rows.append(row)
                print(f"  {cand[0]}: " + (f"wave {row['expert_wave_local_us']:.0f} int {row['interleaved_local_us']:.0f}"
                      f" us x{row['vs_best_library']:.3f} best library; L2 ml {row['l2_mainloop_us']:.2f} gap "
                      f"{row['l2_gap_us']} L1 ml {row['l1_mainloop_us']:.1f}" if "best_us" in row
                      else f"FAILED {row.get('error') or row.get('check')}") + f" [{time.time() - t0:.0f}s]", flush=True)
    got = {}
    for row in rows:
        if "best_us" in row:
            got.setdefault(row["cand"], {})[row["config"]] = row["vs_best_library"]
    common = set.intersection(*(set(v) for k, v in got.items() if k in PICKABLE)) if got else set()
    score = {k: float(np.exp(np.mean(np.log([v[c] for c in common])))) for k, v in got.items() if common}
    pickable = {k: v for k, v in score.items() if k in PICKABLE}
    pick = max(pickable, key=pickable.get) if pickable else "now"
    kw = dict(next(c for c in CANDS if c[0] == pick)[4])
    opts = {k: kw[k] for k in ("place", "early_rows", "prefetch") if k in kw}
    (out / "pick.json").write_text(json.dumps(opts) + "\n")
    print(json.dumps({"geomean_vs_best_library": score, "over": sorted(common), "pick": pick, "options": opts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
