"""Short-K tile configurations of the fused MoE FFN against torch._grouped_mm, in one device call (issue 17).

Run 4e67eac-shortk left five bf16 configurations with a short Linear-2 (K = I <= 1024) under 0.9x
``torch._grouped_mm``: between two Linear-2 mainloops of ~6.4 us a program spends ~5.4 us in the
epilogue and the next tile's start, in series. This times candidate configurations on those five and
on two long-K controls, the library in the same process: the sweep's (BLOCK_M 128, one program per SM),
and two programs per SM on a schedule built for 2 x SMs programs (BLOCK_M 64, fewer stages or a
register cap, so both fit: ``xstage.hw.moe.residency``), so one program's epilogue overlaps the other's
mainloop; BLOCK_M 64 at one program per SM separates the smaller tile from the residency. Each point
is checked first (both schedules into the poisoned local Combine against the float32 reference, error
flag), then expert-wave and interleaved with remote stores off are timed, and one instrumented
expert-wave launch gives the median Linear-2 mainloop and the median gap between consecutive
Linear-2 mainloops of a program.

    python3 benchmarks/moe_shortk_tune.py --out $OUT/shortk-tune
Prints one line per point and a table last; writes ``tune.jsonl`` (provenance first).
"""

import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

BN = 256
# (label, block_m, block_n, programs per SM, kernel options); the sweep's configuration first
BASE = {"block_k": 64, "num_stages": 3, "num_warps": 8, "tma": True, "act_tma": True}
CANDS = [("sweep", 128, BN, 1, BASE),
         ("bm64x2-st2-w4", 64, BN, 2, {**BASE, "num_stages": 2, "num_warps": 4}),
         ("bm64x2-st2-w8-r128", 64, BN, 2, {**BASE, "num_stages": 2, "maxnreg": 128}),
         ("bm64x2-bk32-st4-w4", 64, BN, 2, {**BASE, "block_k": 32, "num_stages": 4, "num_warps": 4}),
         ("bm64x1-st3-w4", 64, BN, 1, {**BASE, "num_warps": 4}),
         ("bm128-bn128x2-st3-r128", 128, 128, 2, {**BASE, "maxnreg": 128})]


def configs():
    """The five short-K misses of run-4e67eac-shortk, then two long-K controls (the sweep's tuples)."""
    from xstage.hw.moe.bench import SWEEP

    want = [(7168, 512, 8192, "balanced", 8), (7168, 512, 8192, "skewed", 8), (4096, 1024, 17440, "skewed", 64),
            (4096, 1024, 8192, "balanced", 8), (4096, 1024, 8192, "skewed", 8),
            (7168, 2048, 8192, "balanced", 8), (2048, 4096, 8192, "balanced", 8)]
    pick = {(c[1], c[2], c[3], c[4], c[7]): c for c in SWEEP if c[5] == "bf16" and c[6] == 8}
    return [pick[w] for w in want]


def l2_gaps(tiles: np.ndarray, log: np.ndarray) -> dict:
    """Median Linear-2 mainloop (us) and median gap (us) from one Linear-2 mainloop's end to the next
    Linear-2 mainloop's start of the same program, from an instrumented launch's log."""
    kind, prog = tiles[:, 0], log[:, 0]
    ml = (log[:, 5] - log[:, 4]) / 1e3
    order = np.lexsort((log[:, 2], prog))
    k, p = kind[order], prog[order]
    both = (k[:-1] == 1) & (k[1:] == 1) & (p[:-1] == p[1:])
    gap = (log[order][1:, 4] - log[order][:-1, 5]) / 1e3
    return {"l2_mainloop_us": float(np.median(ml[kind == 1])), "l2_gap_us": float(np.median(gap[both]))
            if both.any() else None, "l1_mainloop_us": float(np.median(ml[kind == 0]))}


def local_setup(problem, programs: int, seed: int, group_rows: int = 8):
    """A ``Setup`` whose "remote" Combine is in device memory too (only local stores are timed here:
    no host-mapped buffers to pin)."""
    from xstage.hw.moe.buffers import Combine
    from xstage.hw.moe.setup import Setup
    from xstage.sim.workloads.moe_layout import dispatch_layout

    lay = dispatch_layout(problem)
    return Setup(problem, programs, seed, layout=lay, combine=Combine(lay, "cuda", remote=False),
                 group_rows=group_rows)


def candidate_rows(cfg, cands, point_fn, extra: dict, f, t0: float, budget_s: float):
    """(candidate, row) of each candidate in turn: ``point_fn(cand)``'s row, or the error it raised, with
    ``extra`` added and written to ``f`` as one JSON line; candidates past the budget are skipped (and said)."""
    import torch

    for cand in cands:
        if time.time() - t0 > budget_s:
            print(f"  budget reached: skip {cand[0]}", flush=True)
            continue
        try:
            row = point_fn(cand)
        except Exception as err:  # noqa: BLE001 - a configuration that does not fit or compile is reported
            traceback.print_exc(limit=1)
            row = {"model": cfg[0], "cand": cand[0], "error": f"{type(err).__name__}: {str(err)[:300]}"}
        row.update(extra)
        torch.cuda.empty_cache()
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()
        yield cand, row


def time_local(s, kw: dict, trials: int, rounds: int) -> tuple:
    """Both schedules with remote stores off: ({variant: median us}, the faster one's us)."""
    from xstage.hw.common.timing import time_variants

    fns = {"expert_wave_local": lambda: s.run("expert_wave", False, kw),
           "interleaved_local": lambda: s.run("interleaved", False, kw)}
    times, _ = time_variants(fns, trials=trials, warmup=2, rounds=rounds)
    med = {k: float(np.median(v)) for k, v in times.items()}
    return med, min(med.values())


def point(cfg, cand, sms, lib_us, trials) -> dict:
    import torch

    from moe_tune import check
    from xstage.hw.common.timing import sync
    from xstage.hw.moe.residency import _checked
    from xstage.sim.workloads.moe_layout import MoeProblem

    model, h, i, t, r, prec, world, experts = cfg
    label, bm, bn, pps, kw = cand
    p = MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec, world_size=world, block_m=bm,
                   block_n=bn)
    s = local_setup(p, sms * pps, seed=p.seed + 11, group_rows=8)
    row = {"config": p.label(), "model": model, "cand": label, "block_m": bm, "block_n": bn, "programs_per_sm": pps,
           **kw, "programs": sms * pps, "lead_rows": s.lead, "tiles": int(len(s.dev["expert_wave"].tiles_np))}
    row["check"] = check(s, kw)
    res = [v for k, v in _checked.items() if k[1] == sms * pps and dict(k[2]).get("BLOCK_M") == bm
           and dict(k[2]).get("num_stages") == kw["num_stages"] and dict(k[2]).get("num_warps") == kw["num_warps"]]
    if res:
        row["resources"] = res[-1]
    if not all(c["ok"] for c in row["check"].values()):
        return row
    med, best = time_local(s, kw, trials, rounds=2)
    row.update({f"{k}_us": v for k, v in med.items()})
    row["vs_library"] = lib_us / best
    log = torch.zeros((len(s.dev["expert_wave"].tiles_np), 8), dtype=torch.int64, device="cuda")
    s.run("expert_wave", False, kw, tile_log=log)
    sync()
    row.update(l2_gaps(s.dev["expert_wave"].tiles_np, log.cpu().numpy()))
    return row


def main() -> int:
    from moe_tune import run_args

    args = run_args(__doc__, 10, 170.0)
    from moe_tune import library_fn
    from xstage.hw.common.timing import time_variants
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
            s = local_setup(MoeProblem(h, i, t, local_experts=experts, routing=r, precision=prec,
                                       world_size=world, block_n=BN), sms, seed=7)
            lib, name = library_fn(s)
            times, _ = time_variants({"lib": lib}, trials=args.trials, warmup=2, rounds=2)
            lib_us = float(np.median(times["lib"]))
            del s, lib
            print(f"{model} h{h}/i{i}/t{t}/{r}/e{experts}: {name} {lib_us:.0f} us", flush=True)
            extra = {"hidden": h, "intermediate": i, "tokens": t, "routing": r, "experts": experts,
                     "library": name, "library_us": lib_us}
            for cand, row in candidate_rows(cfg, CANDS, lambda c: point(cfg, c, sms, lib_us, args.trials), extra, f,
                                            t0, args.budget_s):
                rows.append(row)
                ok = "vs_library" in row
                print(f"  {cand[0]}: " + (f"wave {row['expert_wave_local_us']:.0f} int {row['interleaved_local_us']:.0f}"
                      f" us x{row['vs_library']:.3f} lib; L2 ml {row['l2_mainloop_us']:.2f} gap {row['l2_gap_us']}"
                      f" L1 ml {row['l1_mainloop_us']:.1f} us {row.get('resources', '')}" if ok else
                      f"FAILED {row.get('error') or row.get('check')}") + f" [{time.time() - t0:.0f}s]", flush=True)
    print("\nconfig | " + " | ".join(c[0] for c in CANDS))
    for cfg in configs():
        got = {x["cand"]: x for x in rows if x.get("hidden") == cfg[1] and x.get("intermediate") == cfg[2]
               and x.get("tokens") == cfg[3] and x.get("routing") == cfg[4]}
        print(f"h{cfg[1]}/i{cfg[2]}/t{cfg[3]}/{cfg[4][:4]} | " + " | ".join(
            f"{got[c[0]]['vs_library']:.3f}" if "vs_library" in got.get(c[0], {}) else "-" for c in CANDS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
