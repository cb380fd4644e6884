"""The seven short-K bf16 configurations under 0.9x the faster library: the flattened kernel against today's (issue 17).

After run-7c8dfb2-quack seven bf16 configurations were under 0.9x the faster grouped-GEMM library (quack untuned):
DiT-MoE-M x2 (0.819 / 0.820), DiT-MoE-S x2 (0.864 / 0.865), h7168 / I512 x2 (0.875 / 0.879), Qwen3.5-S skewed
(0.894). All run ``bench.BF16_SHORT_K`` (BLOCK 128 x 128, two programs per SM) and pay ~3-5 us per tile between
mainloops: every tile's K loop fills its pipeline and drains it before the epilogue. ``hw/moe/flat.py`` walks the
same tiles in the same per-program order as ONE software-pipelined loop over (tile, K chunk) steps, so the next
tile's first loads are in flight during this tile's epilogue. Candidates (label, BLOCK_M, BLOCK_N, programs per
SM, kernel options, group_rows):

    now              bench.BF16_SHORT_K (early_rows + prefetch, 3 stages, 16 rows side by side)
    flat-st2         the flattened kernel, 2 stages (3 do not fit twice per SM: the epilogue's layout conversion
                     needs its own 32 KB beside the stage buffers inside the fused loop)
    flat-bk32-st4    the flattened kernel, BLOCK_K 32, 4 stages (the same shared memory, 3 loads ahead)

Every point is checked first (both schedules into the poisoned local Combine against the float32 reference, error
flag); ``torch._grouped_mm`` and quack (untuned, and with ``--quack-tuned`` autotuned, timed after the candidates
while the budget lasts) on the same packed rows in the same process. Writes ``tune.jsonl`` (provenance first) and
``short.json`` (the options of the candidate with the best geomean ratio to the faster untuned library, for
``python -m xstage.hw.moe.bench --short-k-kernel short.json``).

    python3 benchmarks/moe_flat_tune.py --out $OUT/flat-tune [--budget-s 120] [--quack-tuned --tuned-budget-s 60]
        [--models DiT-MoE-S,DiT-MoE-M]

Run twice on the H200 (data/moe/flat-tune-b4b9c17, flat-tune-c8b23bc-dit): every flattened point correct, each
2-3.6x slower than ``now``; the pick was ``now`` both times (docs/moe/quack.md, § A flattened loop for short K).
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

R128 = {"block_k": 64, "num_stages": 3, "num_warps": 8, "tma": True, "act_tma": True, "maxnreg": 128}
FLAT = {"block_k": 64, "num_stages": 2, "num_warps": 8, "maxnreg": 128, "flat": True}
CANDS = [("now", 128, 128, 2, {**R128, "early_rows": True, "prefetch": True}, 16),
         ("flat-st2", 128, 128, 2, FLAT, 16),
         ("flat-bk32-st4", 128, 128, 2, {**FLAT, "block_k": 32, "num_stages": 4}, 16)]
WANT = [(1536, 1536, 6976, "balanced", 2), (1536, 1536, 6976, "skewed", 2), (1536, 1536, 3488, "balanced", 2),
        (1536, 1536, 3488, "skewed", 2), (7168, 512, 8192, "skewed", 8), (7168, 512, 8192, "balanced", 8),
        (4096, 1024, 17440, "skewed", 64)]


def configs():
    """The sweep's tuples of the seven configurations."""
    from xstage.hw.moe.bench import SWEEP

    pick = {(c[1], c[2], c[3], c[4], c[7]): c for c in SWEEP if c[5] == "bf16" and c[6] == 8}
    return [pick[w] for w in WANT]


def short_options(label: str) -> dict:
    """``--short-k-kernel`` options of a candidate at BLOCK_N 128 / two per SM (what differs from BF16_SHORT_K)."""
    from xstage.hw.moe.bench import BF16_SHORT_K

    _, _, bn, pps, kw, gr = next(c for c in CANDS if c[0] == label)
    if bn != BF16_SHORT_K["block_n"] or pps != BF16_SHORT_K["programs_per_sm"]:
        raise ValueError(f"{label}: not a BLOCK_N {BF16_SHORT_K['block_n']} x {BF16_SHORT_K['programs_per_sm']} candidate")
    base = BF16_SHORT_K["kernel"]
    out = {k: v for k, v in kw.items() if base.get(k) != v}
    out.update({k: False for k in ("early_rows", "prefetch") if base.get(k) and k not in kw})
    return {**out, **({"group_rows": gr} if gr != BF16_SHORT_K.get("group_rows") else {})}


def libraries(s, trials: int, tuned: bool) -> tuple:
    """({library: median us}, info) of torch._grouped_mm and quack (untuned; ``tuned``: autotuned too), checked first."""
    from moe_place_tune import libraries as lib

    return lib(s, trials, tuned)


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--quack-tuned", action="store_true")
    ap.add_argument("--models", default="", help="only these of the seven (comma-separated model names)")
    ap.add_argument("--tuned-budget-s", type=float, default=60.0, help="seconds for quack's autotuner, after the rest")
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
    rows, setups = [], []
    with open(out / "tune.jsonl", "w") as f:
        f.write(json.dumps({"provenance": provenance(with_gpu=True), "cands": CANDS}, default=str) + "\n")
        only = {m for m in args.models.split(",") if m}
        for cfg in [c for c in configs() if not only or c[0] in only]:
            model, h, i, t, r, prec, world, experts = cfg
            s = local_setup(MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world,
                                       block_n=128), sms, seed=7)
            lib, info = libraries(s, args.trials, False)
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
            setups.append(cfg)
        if args.quack_tuned:  # quack's autotuner beside the untuned figures, while the budget lasts
            t_tuned = time.time()
            for cfg in setups:
                if time.time() - t_tuned > args.tuned_budget_s:
                    print(f"quack tuned: budget reached, skip {cfg[0]}", flush=True)
                    continue
                model, h, i, t, r, prec, world, experts = cfg
                s = local_setup(MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world,
                                           block_n=128), sms, seed=7)
                lib, info = libraries(s, args.trials, True)
                del s
                torch.cuda.empty_cache()
                row = {"quack_tuned_row": True, "config": cfg, **{f"library_{k}_us": v for k, v in lib.items()}, **info}
                f.write(json.dumps(row, default=str) + "\n")
                f.flush()
                print(f"quack tuned {model} h{h}/i{i}/t{t}/{r}: " + " ".join(f"{k} {v:.0f} us" for k, v in lib.items())
                      + f" [{time.time() - t0:.0f}s]", flush=True)
    short = [c[0] for c in CANDS if c[2] == 128 and c[3] == 2]
    got = {}
    for row in rows:
        if "best_us" in row and row["cand"] in short:
            got.setdefault(row["cand"], {})[row["config"]] = row["vs_best_library"]
    common = set.intersection(*(set(v) for v in got.values())) if got else set()
    score = {k: float(np.exp(np.mean(np.log([v[c] for c in common])))) for k, v in got.items()} if common else {}
    pick = max(score, key=score.get) if score else "now"
    (out / "short.json").write_text(json.dumps(short_options(pick)) + "\n")
    print(json.dumps({"pick": pick, "options": short_options(pick), "geomean_vs_best_library": score}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
