"""The seven bf16 configurations under 0.9x the faster grouped-GEMM library, tuned at two programs per SM (issue 17).

After run-61f7365-dit, seven bf16 configurations were under 0.9x the faster library (quack, untuned):
DiT-MoE-M (0.818 / 0.820), DiT-MoE-S (0.856 / 0.862), h7168 / I512 (0.860 / 0.878), Qwen3.5-S skewed (0.898).
All seven run ``bench.BF16_SHORT_K`` (BLOCK 128 x 128, two programs per SM on a 264-program schedule). Their
committed tile logs say where the time goes: programs hold 3 to 5 tiles (Algorithm 1's cursors stride over the
pairs, so the first pairs take one more Linear-1 and one more Linear-2 tile), the hardware pairs programs on an
SM at random, so SMs hold 7 to 9 tiles (mean 7.6) and the makespan follows the fullest; and every tile pays
~3 us between mainloops, of which reading the next tile's fields and a Linear-2 tile's row destinations are
dependent global loads. Candidates (all keep the simulator's tile arrays and each program's order), short K
(the seven, two programs per SM):

    now           BF16_SHORT_K as it was (before place-tune-7c8dfb2)
    pf            + the next tile's fields loaded before this tile's mainloop (``prefetch``)
    early-pf      + a Linear-2 tile's destinations loaded before its mainloop (``early_rows``)
    early-pf-g16, pf-g16   the same with 16 rows walked side by side (``group_rows``)
    place-pf      pf + each SM runs a heavy and a light program (``hw/moe/placement.py``; for the record: in the
                  first call (data/moe/place-tune-724376d) placement lost 8-13 %, so it is never picked)

and long K (three configurations at 0.90-0.91x, one program per SM, BLOCK_N 256): ``bn256x1`` (bench.BF16_FAST as it was),
``bn256x1-pf``, ``bn256x1-early-pf``.

Every point is checked first (both schedules into the poisoned local Combine, float32 reference, error flag),
``torch._grouped_mm`` and quack (untuned; ``--quack-tuned``: also autotuned) timed in the same process on the
same packed rows. Writes ``tune.jsonl`` (provenance first) and ``short.json`` / ``long.json``: the options of
each family's candidate with the best geomean ratio over the configurations every candidate ran, for
``python -m xstage.hw.moe.bench --short-k-kernel short.json --long-k-kernel long.json``.

    python3 benchmarks/moe_place_tune.py --out $OUT/place-tune [--budget-s 100] [--quack-tuned]
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

R128 = {"block_k": 64, "num_stages": 3, "num_warps": 8, "tma": True, "act_tma": True, "maxnreg": 128}
BASE = {"block_k": 64, "num_stages": 3, "num_warps": 8, "tma": True, "act_tma": True}   # BF16_FAST before 7c8dfb2
EPF = {"early_rows": True, "prefetch": True}
# (label, block_m, block_n, programs per SM, kernel options, group_rows) per family; the first is what runs now
CANDS = {"short": [("now", 128, 128, 2, R128, 8), ("pf", 128, 128, 2, {**R128, "prefetch": True}, 8),
                   ("early-pf", 128, 128, 2, {**R128, **EPF}, 8), ("early-pf-g16", 128, 128, 2, {**R128, **EPF}, 16),
                   ("pf-g16", 128, 128, 2, {**R128, "prefetch": True}, 16),
                   ("place-pf", 128, 128, 2, {**R128, "prefetch": True, "place": True}, 8)],
         "long": [("bn256x1", 128, 256, 1, BASE, 8), ("bn256x1-pf", 128, 256, 1, {**BASE, "prefetch": True}, 8),
                  ("bn256x1-early-pf", 128, 256, 1, {**BASE, **EPF}, 8)]}
NOT_PICKED = ("place-pf",)   # measured for the record (placement lost in the first call), not a candidate rule
WANT = [("short", (1536, 1536, 6976, "balanced", 2)), ("short", (1536, 1536, 6976, "skewed", 2)),
        ("short", (1536, 1536, 3488, "balanced", 2)), ("short", (1536, 1536, 3488, "skewed", 2)),
        ("short", (7168, 512, 8192, "skewed", 8)), ("short", (7168, 512, 8192, "balanced", 8)),
        ("short", (4096, 1024, 17440, "skewed", 64)),
        ("long", (4096, 2048, 20928, "balanced", 32)), ("long", (2048, 4096, 8192, "balanced", 8)),
        ("long", (4096, 2048, 13952, "balanced", 32))]


def configs():
    """(family, the sweep's tuple) of the configurations tuned."""
    from xstage.hw.moe.bench import SWEEP

    pick = {(c[1], c[2], c[3], c[4], c[7]): c for c in SWEEP if c[5] == "bf16" and c[6] == 8}
    return [(fam, pick[w]) for fam, w in WANT]


def choose(rows: list, family: str) -> tuple:
    """(label, {label: geomean ratio to the faster library}) of the best candidate of ``family`` over the
    configurations every candidate ran (the first candidate when none ran)."""
    labels = [c[0] for c in CANDS[family] if c[0] not in NOT_PICKED]
    got = {}
    for row in rows:
        if "best_us" in row and row["cand"] in labels:
            got.setdefault(row["cand"], {})[row["config"]] = row["vs_best_library"]
    common = set.intersection(*(set(v) for v in got.values())) if got else set()
    score = {k: float(np.exp(np.mean(np.log([v[c] for c in common])))) for k, v in got.items()} if common else {}
    return (max(score, key=score.get) if score else labels[0]), score


def options(family: str, label: str) -> dict:
    """The ``--short-k-kernel`` / ``--long-k-kernel`` options of a candidate (what differs from the bench's)."""
    _, _, _, _, kw, gr = next(c for c in CANDS[family] if c[0] == label)
    out = {k: kw[k] for k in ("place", "early_rows", "prefetch") if k in kw}
    return {**out, **({"group_rows": gr} if gr != 8 else {})}


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
        for fam, cfg in configs():
            model, h, i, t, r, prec, world, experts = cfg
            s = local_setup(MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world,
                                       block_n=128 if fam == "short" else 256), sms, seed=7)
            lib, info = libraries(s, args.trials, args.quack_tuned)
            del s
            torch.cuda.empty_cache()
            best_lib = min(lib.values())
            print(f"{model} h{h}/i{i}/t{t}/{r}/e{experts}: " + " ".join(f"{k} {v:.0f} us" for k, v in lib.items()),
                  flush=True)
            extra = {"family": fam, "hidden": h, "intermediate": i, "tokens": t, "routing": r, "experts": experts,
                     **{f"library_{k}_us": v for k, v in lib.items()}, **info}

            def run_point(c):
                row = point(cfg, c, sms, lib, args.trials)
                if "best_us" in row:
                    row["vs_best_library"] = best_lib / row["best_us"]
                return row

            for cand, row in candidate_rows(cfg, CANDS[fam], run_point, extra, f, t0, args.budget_s):
                rows.append(row)
                print(f"  {cand[0]}: " + (f"wave {row['expert_wave_local_us']:.0f} int {row['interleaved_local_us']:.0f}"
                      f" us x{row['vs_best_library']:.3f} best library; L2 ml {row['l2_mainloop_us']:.2f} gap "
                      f"{row['l2_gap_us']} L1 ml {row['l1_mainloop_us']:.1f}" if "best_us" in row
                      else f"FAILED {row.get('error') or row.get('check')}") + f" [{time.time() - t0:.0f}s]", flush=True)
    summary = {}
    for fam in CANDS:
        label, score = choose([r for r in rows if r.get("family") == fam], fam)
        opts = options(fam, label)
        (out / f"{fam}.json").write_text(json.dumps(opts) + "\n")
        summary[fam] = {"pick": label, "options": opts, "geomean_vs_best_library": score}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
