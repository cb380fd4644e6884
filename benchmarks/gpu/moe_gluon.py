"""Issue 17 on the GPU: the warp-specialised Gluon MoE kernel (``hw/moe/gluon.py``) checked, then timed beside
today's Triton kernel and ``torch._grouped_mm`` (and quack's grouped GEMM where it imports) in one process.

Per shape (the six bf16 configurations under 0.9x the faster library in run-b4b9c17, and two controls): the
problem built by the bench's own code (``Setup``, ``bench.config_tiles``: today's Triton options and tiles), both
schedules; each Gluon option set of ``--variants`` runs into a NaN-poisoned local Combine on fresh random inputs and
is checked against the float32 reference (every element written, no stray stores, the error flag clear), then every
checked variant is timed (``timing.time_variants``: CUDA-graph replays, rotated rounds, median of ``--trials``).
One program walking every Linear-2 tile first must trip the loader's bounded wait (error flag set, the launch ends).
A variant's ``tiles`` ({block_n, programs_per_sm, group_rows}) runs it on that problem's schedules instead of
``GLUON_TILES``'s.

    XSTAGE_GIT_COMMIT=... python3 benchmarks/gpu/moe_gluon.py --out $OUT/gluon [--variants '[{}, {"stages": 2}]']

Writes ``moe-gluon.json`` (rows, checks, residency, provenance) under ``--out`` (temp file + rename).
"""

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

# (model, hidden, intermediate, tokens, local experts, routing): W = 8 ranks as in the sweep
SHAPES = [("DiT-MoE-M-S", 1536, 1536, 6976, 2, "balanced"), ("DiT-MoE-M-S", 1536, 1536, 6976, 2, "skewed"),
          ("DiT-MoE-S-S", 1536, 1536, 3488, 2, "balanced"), ("DiT-MoE-S-S", 1536, 1536, 3488, 2, "skewed"),
          ("earlier", 7168, 512, 8192, 8, "skewed"), ("earlier", 7168, 512, 8192, 8, "balanced"),
          ("control", 7168, 2048, 8192, 8, "balanced"), ("control", 4096, 1024, 8192, 8, "balanced")]
GLUON_TILES = {"block_n": 128, "programs_per_sm": 2, "group_rows": 16}


def log(*a):
    print(*a, flush=True)


def gluon_setup(problem, s_triton, sms: int, seed: int, tiles: dict | None = None, cache: dict | None = None):
    """The Setup a Gluon variant runs on: today's when its tiles (``GLUON_TILES`` updated by the variant's
    ``tiles``: block_n, programs_per_sm, group_rows) and programs are today's, else the same problem at those
    tiles (same seed: same tokens and weights), built once per tiles in ``cache``."""
    from dataclasses import replace

    from xstage.hw.moe.setup import Setup

    t = {**GLUON_TILES, **(tiles or {})}
    key = (t["block_n"], sms * t["programs_per_sm"], t["group_rows"])
    if key == (problem.block_n, s_triton.sms, s_triton.group_rows):
        return s_triton
    cache = {} if cache is None else cache
    if key not in cache:
        cache[key] = Setup(replace(problem, block_n=key[0]), key[1], seed=seed, group_rows=key[2])
    return cache[key]


def check(s, run, label: str, variant: str, ref) -> dict:
    from xstage.hw.common.timing import sync

    out = {"config": label, "variant": variant}
    try:
        for sched in ("expert_wave", "interleaved"):
            comb = s.combine[False]
            comb.poison()
            s.dev[sched].error.zero_()
            run(sched)
            sync()
            res = comb.check(ref)
            err = int(s.dev[sched].error.item())
            out[sched] = {**res, "error_flag": err, "ok": bool(res["ok"] and err == 0)}
        out["ok"] = all(out[k]["ok"] for k in ("expert_wave", "interleaved"))
    except Exception as err:  # noqa: BLE001 - a variant that does not compile or fit is recorded, not timed
        out.update(ok=False, error=f"{type(err).__name__}: {str(err)[:300]}")
        traceback.print_exc()
    return out


def bail_check(s, opts: dict) -> dict:
    """One program walking every Linear-2 tile before any Linear-1 tile cannot finish a wait: the loader's
    bounded wait must set the error flag and the launch must end."""
    import numpy as np

    from xstage.hw.common.timing import device, sync
    from xstage.hw.moe.buffers import DeviceLayout
    from xstage.hw.moe.gluon_launch import launch_moe_gluon

    tiles = s.dev["expert_wave"].tiles_np
    order = np.concatenate([np.flatnonzero(tiles[:, 0] == 1), np.flatnonzero(tiles[:, 0] == 0)])
    dev = DeviceLayout(s.layout, {"tiles": tiles[order], "sm_offsets": np.array([0, len(order)])}, device())
    t0 = time.time()
    launch_moe_gluon(s.x, s.w1_packed, s.w2, s.act, dev, s.combine[False], spin_limit=64, **opts)
    sync()
    flag = int(dev.error.item())
    return {"config": s.problem.label(), "variant": "gluon_l2_first_bails", "tiles": int(len(order)),
            "error_flag": flag, "wall_s": time.time() - t0, "ok": flag == 1}


def measure(shape, variants: list, sms: int, trials: int, seed: int, quack: bool) -> tuple:
    import numpy as np

    from xstage.errors import InputError
    from xstage.hw.common.timing import time_variants
    from xstage.hw.moe import bench as B
    from xstage.hw.moe.baseline import grouped_mm_fn, quack_grouped_fn
    from xstage.hw.moe.gluon_launch import launch_moe_gluon
    from xstage.hw.moe.setup import Setup
    from xstage.sim.workloads.moe_layout import MoeProblem

    model, h, i, t, e, r = shape
    cb, pps, tkw = B.config_tiles("bf16", i, dict(B.BF16_FAST), dict(B.W8A8_FAST), False, hidden=h)
    gr = B.config_group_rows("bf16", i, B.GROUP_ROWS)
    problem = MoeProblem(h, i, t, local_experts=e, routing=r, precision="bf16", world_size=8, **cb)
    st = Setup(problem, sms * pps, seed=seed, group_rows=gr)
    label = problem.label()
    log(f"{label}: triton {tkw} BN {problem.block_n} x{pps}/SM rows {gr}; lead D {st.lead}")
    checks, res, setups, refs = [], {}, {}, {}
    refs[id(st)] = st.reference()
    checks.append(check(st, lambda sc: st.run(sc, False, tkw), label, "triton", refs[id(st)]))
    runs, used = {}, {}
    for n, variant in enumerate(variants):
        tag = f"gluon{n}"
        opts = {k: v for k, v in variant.items() if k != "tiles"}
        try:
            sg = used[tag] = gluon_setup(problem, st, sms, seed, variant.get("tiles"), setups)
        except InputError as err:  # tiles this problem cannot take: recorded, not timed
            checks.append({"config": label, "variant": tag, "options": variant, "ok": False, "error": str(err)})
            log(f"  {tag} {variant}: {err}")
            continue
        if id(sg) not in refs:
            refs[id(sg)] = sg.reference()

        def run(sc, opts=opts, sg=sg, tag=tag):
            res[tag] = launch_moe_gluon(sg.x, sg.w1_packed, sg.w2, sg.act, sg.dev[sc], sg.combine[False], **opts)
        c = check(sg, run, label, tag, refs[id(sg)])
        c["options"], c["resources"] = variant, res.get(tag)
        c["tiles"] = {"block_n": sg.problem.block_n, "programs": sg.sms, "group_rows": sg.group_rows, "lead": sg.lead}
        checks.append(c)
        log(f"  {tag} {variant}: {'ok' if c['ok'] else 'FAIL'} {res.get(tag)} "
            + " ".join(f"{k} rel {c[k]['rel_err']:.2e} unwritten {c[k]['unwritten']} stray {c[k]['stray']} "
                       f"flag {c[k]['error_flag']}" for k in ("expert_wave", "interleaved") if k in c))
        if c["ok"]:
            for sc in ("expert_wave", "interleaved"):
                runs[f"{tag}_{sc}_local"] = (lambda sc=sc, run=run: run(sc))
    del refs
    fns = {f"triton_{sc}_local": (lambda sc=sc: st.run(sc, False, tkw)) for sc in ("expert_wave", "interleaved")}
    fns.update(runs)
    gemm, gname = grouped_mm_fn(st)
    act_fixed = (gemm(st.xp, st.w1)[:, :i] * 1).contiguous()
    fns["grouped_mm"] = lambda: (gemm(st.xp, st.w1), gemm(act_fixed, st.w2))
    if quack:
        qfn, qcheck = quack_grouped_fn(st, gemm, act_fixed)
        checks.append(qcheck)
        if qfn is not None:
            fns["quack_grouped_mm"] = qfn
    times, modes = time_variants(fns, trials=trials, warmup=3, rounds=4)
    rows = []
    for name, ts in times.items():
        ts = np.asarray(ts)
        rows.append({"config": label, "model": model, "variant": name, "time_us": float(np.median(ts)),
                     "p25_us": float(np.percentile(ts, 25)), "p75_us": float(np.percentile(ts, 75)),
                     "trials": int(len(ts)), "timing": modes[name], "baseline": gname if name == "grouped_mm" else None,
                     "lead_rows": used.get(name.split("_")[0], st).lead,
                     "programs": used.get(name.split("_")[0], st).sms,
                     "block_n": used.get(name.split("_")[0], st).problem.block_n,
                     "group_rows": used.get(name.split("_")[0], st).group_rows,
                     "options": variants[int(name[5:].split("_")[0])] if name.startswith("gluon") else
                     (tkw if name.startswith("triton") else None)})
    med = {x["variant"]: x["time_us"] for x in rows}
    log("  " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    bail = None
    if shape == SHAPES[min(2, len(SHAPES) - 1)] and variants:   # DiT-MoE-S balanced: small
        try:
            bail = bail_check(used["gluon0"], {k: v for k, v in variants[0].items() if k != "tiles"})
        except Exception as err:  # noqa: BLE001
            bail = {"variant": "gluon_l2_first_bails", "ok": False, "error": f"{type(err).__name__}: {err}"}
        log(f"  D=0 bails: {bail}")
        checks.append(bail)
    return rows, checks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--variants", default="[{}]", help="JSON list of Gluon option dicts (gluon_args.GLUON_DEFAULTS)")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--shapes", default="", help="comma-separated indices into SHAPES (default: all)")
    ap.add_argument("--seed", type=int, default=None, help="input seed (default: from the clock: fresh inputs)")
    ap.add_argument("--budget-s", type=float, default=400)
    args = ap.parse_args(argv)
    variants = json.loads(args.variants)
    if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
        print(f"--variants: {args.variants!r}: must be a JSON list of objects", file=sys.stderr)
        return 2
    import torch

    from xstage.hw.moe.setup import num_sms
    from xstage.provenance import provenance
    from xstage.records import atomic_write_text

    try:
        import quack  # noqa: F401
        quack = True
    except ImportError:
        quack = False
    sms = num_sms(False)
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    picked = [SHAPES[int(k)] for k in args.shapes.split(",") if k] or SHAPES
    t0 = time.time()
    rows, checks = [], []
    for shape in picked:
        if time.time() - t0 > args.budget_s:
            log(f"budget reached: skipping {shape}")
            continue
        try:
            r, c = measure(shape, variants, sms, args.trials, seed, quack)
            rows += r
            checks += c
        except Exception as err:  # noqa: BLE001 - keep the other shapes
            traceback.print_exc()
            checks.append({"config": str(shape), "variant": "measure", "ok": False,
                           "error": f"{type(err).__name__}: {err}"})
        log(f"[{time.time() - t0:.0f} s]")
    failed = [c for c in checks if not c.get("ok")]
    meta = {"args": vars(args), "variants": variants, "seed": seed, "num_sms": sms, "quack": quack,
            "gluon_tiles": GLUON_TILES, "shapes": picked, "wall_s": time.time() - t0,
            "torch": torch.__version__, "provenance": provenance(with_gpu=True)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "moe-gluon.json", json.dumps({"meta": meta, "rows": rows, "checks": checks},
                                                         indent=1, default=str), overwrite=True)
    log(f"moe_gluon: {len(checks) - len(failed)}/{len(checks)} checks ok, {len(rows)} timed rows, "
        f"{time.time() - t0:.0f} s")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
