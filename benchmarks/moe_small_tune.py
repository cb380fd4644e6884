"""Tile configurations of the fused MoE FFN on its worst shapes against torch and quack, one device call (issue 17).

After run 5923141-shortk2 the fused GEMM (remote stores off) is at 0.72-0.74x the faster grouped-GEMM library
(quack, ``compare/moe_library.py``) on DiT-MoE-S (h1536 / I1536, 2 local experts), 0.86-0.87x on h7168 / I512,
0.88x on Qwen3.5-S skewed and 0.91x on h2048 / I4096. This times, on those eight configurations, candidate
configurations of the local kernel (Combine in device memory): BLOCK_M 128 with BLOCK_N 256 or 128, one or
two programs per SM (the 264-program ``BF16_SHORT_K`` configuration extended to long K), 3 or 4 stages and
the rows walked side by side (``group_rows``), against ``torch._grouped_mm`` and quack's grouped GEMM
(``quack.gemm_interface.gemm``, untuned, ``cu_seqlens_m``) timed in the same process on the same packed
rows (quack checked against torch first). Every point is checked before it is timed (both schedules into
the poisoned local Combine against the float32 reference, error flag: ``moe_tune.check``).

Then (``--measure``) each configuration is re-measured through ``bench.measure`` — checks, every variant,
baselines, tile logs — at its fastest checked candidate, as a run of its own under ``--out``/run
(records carry ``tile_config``).

    python3 benchmarks/moe_small_tune.py --out $OUT/small-tune [--measure] [--only LABEL,...]
Prints one line per point and a table last; writes ``tune.jsonl`` (provenance first).
"""

import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

BASE = {"block_k": 64, "num_stages": 3, "num_warps": 8, "tma": True, "act_tma": True}
R128 = {**BASE, "maxnreg": 128}
# (label, block_m, block_n, programs per SM, kernel options, group_rows)
CANDS = [("bn256x1", 128, 256, 1, BASE, 8), ("bn256x1-st4", 128, 256, 1, {**BASE, "num_stages": 4}, 8),
         ("bn128x1", 128, 128, 1, BASE, 8), ("bn128x1-st4", 128, 128, 1, {**BASE, "num_stages": 4}, 8),
         ("bn128x2-r128", 128, 128, 2, R128, 8), ("bn128x2-r128-g4", 128, 128, 2, R128, 4),
         ("bn128x2-r128-g16", 128, 128, 2, R128, 16), ("bn256x1-g4", 128, 256, 1, BASE, 4)]
WANT = [(1536, 1536, 3488, "balanced", 2), (1536, 1536, 3488, "skewed", 2), (1536, 1536, 6976, "balanced", 2),
        (1536, 1536, 6976, "skewed", 2), (7168, 512, 8192, "balanced", 8), (7168, 512, 8192, "skewed", 8),
        (4096, 1024, 17440, "skewed", 64), (2048, 4096, 8192, "balanced", 8)]


def configs(only: str = ""):
    """The eight worst bf16 configurations against the faster library (the sweep's tuples); only those
    labelled in ``only`` (comma-separated ``MoeProblem.label()``) when it names any."""
    from xstage.hw.moe.bench import SWEEP
    from xstage.sim.workloads.moe_layout import MoeProblem

    pick = {(c[1], c[2], c[3], c[4], c[7]): c for c in SWEEP if c[5] == "bf16" and c[6] == 8}
    want = {x for x in only.split(",") if x}
    return [pick[w] for w in WANT if not want or MoeProblem(*w[:3], routing=w[3], local_experts=w[4],
                                                             precision="bf16", world_size=8).label() in want]


def libraries(s, trials):
    """{library: median us} of torch._grouped_mm and quack (when it imports and agrees) on ``s``'s rows."""
    import torch

    from moe_tune import library_fn
    from xstage.hw.common.timing import time_variants
    from xstage.hw.moe.baseline import grouped_mm_fn

    lib, name = library_fn(s)
    fns, info = {"torch": lib}, {"torch_name": name}
    try:
        from quack.gemm_interface import gemm as quack_gemm

        gemm, _ = grouped_mm_fn(s)
        act = (gemm(s.xp, s.w1)[:, :s.problem.intermediate] * 1).contiguous()
        cu = torch.cat([torch.zeros(1, dtype=torch.int32, device="cuda"), s.offs.to(torch.int32)])
        w1t, w2t = s.w1.transpose(-2, -1), s.w2.transpose(-2, -1)
        q = lambda: (quack_gemm(s.xp, w1t, cu_seqlens_m=cu), quack_gemm(act, w2t, cu_seqlens_m=cu))  # noqa: E731
        a, b = q()
        errs = [float((m.float() - r.float()).norm() / r.float().norm()) for m, r in ((a, gemm(s.xp, s.w1)),
                                                                                     (b, gemm(act, s.w2)))]
        info["quack_rel_err"] = max(errs)
        if max(errs) < 1e-2:
            fns["quack"] = q
    except Exception as err:  # noqa: BLE001 - quack missing or failing: torch only, said in the record
        info["quack_error"] = f"{type(err).__name__}: {str(err)[:200]}"
    times, _ = time_variants(fns, trials=trials, warmup=3, rounds=3)
    return {k: float(np.median(v)) for k, v in times.items()}, info


def point(cfg, cand, sms, lib, trials) -> dict:
    import torch

    from moe_shortk_tune import l2_gaps, local_setup, time_local
    from moe_tune import check
    from xstage.hw.common.timing import sync
    from xstage.sim.workloads.moe_layout import MoeProblem

    model, h, i, t, r, prec, world, experts = cfg
    label, bm, bn, pps, kw, gr = cand
    p = MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world, block_m=bm,
                   block_n=bn)
    s = local_setup(p, sms * pps, seed=p.seed + 11, group_rows=gr)
    row = {"config": p.label(), "model": model, "cand": label, "block_m": bm, "block_n": bn, "programs_per_sm": pps,
           "group_rows": gr, **kw, "programs": sms * pps, "tiles": int(len(s.dev["expert_wave"].tiles_np))}
    row["check"] = check(s, kw)
    if not all(c["ok"] for c in row["check"].values()):
        return row
    med, best = time_local(s, kw, trials, rounds=3)
    row.update({f"{k}_us": v for k, v in med.items()})
    row["best_us"] = best
    row.update({f"vs_{k}": v / best for k, v in lib.items()})
    log = torch.zeros((len(s.dev["expert_wave"].tiles_np), 8), dtype=torch.int64, device="cuda")
    s.run("expert_wave", False, kw, tile_log=log)
    sync()
    row.update(l2_gaps(s.dev["expert_wave"].tiles_np, log.cpu().numpy()))
    return row


def remeasure(picks: dict, sms: int, trials: int, out: Path, budget_s: float) -> None:
    """Each configuration through ``bench.measure`` at its picked candidate; one run of records."""
    from xstage.hw.moe import bench as B
    from xstage.provenance import provenance
    from xstage.records.moe import save_run
    from xstage.sim.workloads.moe_layout import MoeProblem

    t0 = time.time()
    rows, tiles, checks = [], [], []
    for cfg, cand in picks.items():
        if time.time() - t0 > budget_s:
            print(f"measure budget reached: skip {cfg}", flush=True)
            continue
        model, h, i, t, r, prec, world, experts = cfg
        label, bm, bn, pps, kw, gr = cand
        p = MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world, block_m=bm,
                       block_n=bn)
        try:
            kr, tr, kc = B.measure(p, sms * pps, dict(kw), trials, False, group_rows=gr, model=model,
                                   programs_per_sm=pps, tile_config=label)
        except Exception as err:  # noqa: BLE001 - keep the others
            traceback.print_exc(limit=2)
            checks.append({"variant": "measure", "config": p.label(), "ok": False, "error": f"{type(err).__name__}: {err}"})
            continue
        rows, tiles, checks = rows + kr, tiles + tr, checks + kc
        by = {x["variant"]: x["time(us)"] for x in kr}
        loc = min(by["expert_wave_local"], by["interleaved_local"])
        print(f"measure {p.label()} [{label}]: local {by['expert_wave_local']:.0f}/{by['interleaved_local']:.0f} "
              f"grouped_mm {by['grouped_mm']:.0f} us (x{by['grouped_mm'] / loc:.3f}); checks "
              f"{sum(c['ok'] for c in kc)}/{len(kc)} [{time.time() - t0:.0f}s]", flush=True)
    if not rows:
        return
    meta = {"config": {"picks": {"|".join(map(str, k)): list(v) for k, v in picks.items()}, "num_sms": sms,
                       "sweep": list(picks)}, "provenance": provenance(with_gpu=True)}
    for path in save_run(out / "run", rows, tiles, checks, meta, True):
        print(f"wrote {path}", flush=True)
    bad = [c for c in checks if not c.get("ok")]
    print(json.dumps({"measured": len({x['config'] for x in rows}), "checks": len(checks), "failed": len(bad)}))


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--measure-budget-s", type=float, default=60.0)
    ap.add_argument("--only", default="", help="comma-separated configuration labels (MoeProblem.label())")
    args = ap.parse_args()
    import torch

    from moe_shortk_tune import candidate_rows, local_setup
    from xstage.hw.moe.setup import num_sms
    from xstage.provenance import provenance
    from xstage.sim.workloads.moe_layout import MoeProblem

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sms = num_sms(False)
    t0 = time.time()
    rows, picks = [], {}
    with open(out / "tune.jsonl", "w") as f:
        f.write(json.dumps({"provenance": provenance(with_gpu=True), "cands": CANDS}, default=str) + "\n")
        for cfg in configs(args.only):
            model, h, i, t, r, prec, world, experts = cfg
            s = local_setup(MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec,
                                       world_size=world, block_n=256), sms, seed=7)
            lib, info = libraries(s, args.trials)
            del s
            torch.cuda.empty_cache()
            print(f"{model} h{h}/i{i}/t{t}/{r}/e{experts}: " + " ".join(f"{k} {v:.0f} us" for k, v in lib.items())
                  + f" {info}", flush=True)
            got = []
            extra = {"hidden": h, "intermediate": i, "tokens": t, "routing": r, "experts": experts,
                     **{f"library_{k}_us": v for k, v in lib.items()}, **info}
            for cand, row in candidate_rows(cfg, CANDS, lambda c: point(cfg, c, sms, lib, args.trials), extra, f, t0,
                                            args.budget_s):
                rows.append(row)
                if "best_us" in row:
                    got.append((row["best_us"], cand))
                print(f"  {cand[0]}: " + (f"wave {row['expert_wave_local_us']:.0f} int {row['interleaved_local_us']:.0f}"
                      f" us x{row['vs_torch']:.3f} torch x{row.get('vs_quack', float('nan')):.3f} quack; L2 ml "
                      f"{row['l2_mainloop_us']:.2f} gap {row['l2_gap_us']} L1 ml {row['l1_mainloop_us']:.1f}"
                      if "best_us" in row else f"FAILED {row.get('error') or row.get('check')}")
                      + f" [{time.time() - t0:.0f}s]", flush=True)
            if got:
                picks[cfg] = min(got, key=lambda g: g[0])[1]
    print("\nconfig | " + " | ".join(c[0] for c in CANDS) + "  (x quack, else x torch)")
    for cfg in configs(args.only):
        sel = {x["cand"]: x for x in rows if x.get("hidden") == cfg[1] and x.get("intermediate") == cfg[2]
               and x.get("tokens") == cfg[3] and x.get("routing") == cfg[4]}
        print(f"h{cfg[1]}/i{cfg[2]}/t{cfg[3]}/{cfg[4][:4]} | " + " | ".join(
            f"{sel[c[0]].get('vs_quack', sel[c[0]]['vs_torch']):.3f}" if "best_us" in sel.get(c[0], {}) else "-"
            for c in CANDS) + f"  pick {picks.get(cfg, ('-',))[0]}")
    if args.measure and picks:
        remeasure(picks, sms, args.trials + 10, out, args.measure_budget_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
