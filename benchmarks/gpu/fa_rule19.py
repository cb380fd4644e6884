"""fused - FA-only of the split Triton kernel by an instrument that scores itself (issue 15 item 5, rule 19;
``docs/calibration/attention-rule19.md``; plan ``data/attention-extra/fa-rule19-preregistered-h200-pcie-host.json``).

The builds a user runs (no tile log), CUDA graphs, FA-only and the fused kernel launched back to back many times
(order alternating), two blocks back to back so that each block's median is a prediction of the other's. Per point
of the plan (M, heads, head dim, block_n; its pairs per block N), inputs fresh (seed ``2 + index``):

1. checks: the float32 reference on the fresh inputs; destinations poisoned (NaN) before each checked launch and
   every element checked written: FA-only, ``fused_wb_split`` into the host-mapped destinations, ``split_hbm`` (the
   same build into device memory), and the instrumented FA-only and ``split_hbm`` launches (tile log with clocks);
2. registers and spills of the four compiled builds (FA-only / split, plain / instrumented);
3. graph blocks A then B (``timing.paired_differences`` with ``raw``): FA-only vs ``fused_wb_split`` N pairs, then
   FA-only vs ``split_hbm`` ``N_O`` pairs; every launch's own event time is kept;
4. direct block: the same plain builds without graphs, ``N_DIRECT`` pairs each (graph vs direct launch);
5. in-pair block: ``fa_split_inpair.inpair`` unchanged (every launch instrumented with tile clocks, direct, 8 pairs
   per block): the committed instrument at the same point, and rule 17's inputs (``split_hbm`` time and wave log).

Records under ``--out`` (saved after every point; summary records of the free-form table "frame"):
``rule19-pairs.parquet`` (one row per timed pair: point, protocol graph / direct, block A / B / -, variant, pair,
order, ``fa(us)``, ``other(us)``, ``diff(us)``), ``inpair-launch.parquet`` and ``inpair-wave.parquet`` (as
``fa_split_inpair.py`` writes them, rep 0), ``rule19-meta.json`` (plan, checks, compile stats, per point wall
times, provenance with the GPU). Points are started while ``--budget-s`` is left.

    python benchmarks/gpu/fa_rule19.py --plan data/attention-extra/fa-rule19-preregistered-h200-pcie-host.json \\
        --out $OUT --budget-s 260
"""

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

N_DIRECT = 16
N_INPAIR = 8


def compile_stats(A, cfg, fused: bool, build: str = "plain") -> dict:
    return A.compile_stats(cfg, fused, build)


def point_config(p: dict):
    """The split tile-end kernel's configuration at a plan point {"M", "heads", "head_dim", "block_n"} (W = 8, TMA,
    write-through stores, staggered, split tail), validated by ``AttentionConfig``."""
    from xstage.hw.attention.config import AttentionConfig

    base = AttentionConfig(16384, 3, 128, 8, block_n=128, num_stages=3, tma=True, store_cache=".wt",
                           stagger=True, split_tail=True)
    return replace(base, seq_len=int(p["M"]), heads=int(p["heads"]), head_dim=int(p["head_dim"]),
                   block_n=int(p["block_n"]))


def builds(cfg, seed: int) -> dict:
    """The point's fresh inputs, float32 reference, destinations and the five launchers of step 1 (module doc):
    {"q", "k", "v", "ref", "dests", "hbm", "out", "log", "sc", "fns"}. Rule 20 (``fa_rule20.py``) imports it."""
    import torch

    from xstage.hw.attention import kernel as A
    from xstage.hw.attention.variants import kernel_variants, random_qkv, reference
    from xstage.hw.common.timing import device

    q, k, v = random_qkv(cfg, seed)
    ref = reference(q, k, v)
    dests = A.Destinations.emulated(cfg.layout, device())
    hbm = A.Destinations.in_device_memory(cfg.layout, device())
    out = torch.empty_like(q)
    _, variant_cfg = kernel_variants(cfg, q, k, v, out, dests.table)
    sc = variant_cfg["fused_wb_split"]
    log = torch.zeros((cfg.layout.num_tiles, 8), dtype=torch.int64, device=device())
    fns = {"fa": lambda: A.launch_fa(q, k, v, cfg, out=out),
           "fused_wb_split": lambda: A.launch_fa(q, k, v, sc, dest_table=dests.table),
           "split_hbm": lambda: A.launch_fa(q, k, v, sc, dest_table=hbm.table),
           "fa_instrumented": lambda: A.launch_fa(q, k, v, cfg, out=out, tile_log=log, tile_clocks=True),
           "split_hbm_instrumented": lambda: A.launch_fa(q, k, v, sc, dest_table=hbm.table, tile_log=log,
                                                         tile_clocks=True)}
    return {"q": q, "k": k, "v": v, "ref": ref, "dests": dests, "hbm": hbm, "out": out, "log": log, "sc": sc,
            "fns": fns}


def check_build(cfg, b: dict, name: str, fn=None, dests=None) -> dict:
    """One checked launch of ``b["fns"][name]`` (or ``fn`` into ``dests``): the destination poisoned (NaN) before,
    compared with the float32 reference after, every element written (every tile logged where instrumented)."""
    from xstage.hw.attention import kernel as A
    from xstage.hw.common.timing import sync

    fn = fn or b["fns"][name]
    d = dests or (b["hbm"] if name.startswith("split_hbm") else b["dests"])
    d.poison()
    b["out"].fill_(float("nan"))
    b["log"].zero_()
    fn()
    sync()
    res = A.compare(b["out"], b["ref"]) if name.startswith("fa") else d.check(b["ref"])
    if name.endswith("instrumented"):
        res["tiles_logged"] = int((b["log"][:, 3] > 0).sum())
        res["ok"] = bool(res["ok"] and res["tiles_logged"] == cfg.layout.num_tiles)
    return {"config": (cfg if name.startswith("fa") else b["sc"]).label(), "variant": name, **res}


def measure_point(cfg, n_pairs: int, n_o: int, seed: int) -> tuple:
    """(pair rows, checks, compile stats, in-pair launch rows, in-pair wave rows) of one point (module doc)."""
    from fa_split_inpair import inpair
    from xstage.hw.attention import kernel as A
    from xstage.hw.common.timing import paired_differences

    b = builds(cfg, seed)
    fns = b["fns"]
    checks, stats = [], {}
    for name in fns:
        checks.append(check_build(cfg, b, name))
        stats[name] = compile_stats(A, cfg if name.startswith("fa") else b["sc"], not name.startswith("fa"),
                                    "clocks" if name.endswith("instrumented") else "plain")
    rows = []
    for block in ("A", "B"):
        for name, n in (("fused_wb_split", n_pairs), ("split_hbm", n_o)):
            raw = []
            paired_differences(fns["fa"], {name: fns[name]}, pairs=n, raw=raw)
            rows += [dict(r, protocol="graph", block=block) for r in raw]
    raw = []
    paired_differences(fns["fa"], {x: fns[x] for x in ("fused_wb_split", "split_hbm")}, pairs=N_DIRECT,
                       capture_fn=lambda fn: (fn, "eager"), raw=raw)
    rows += [dict(r, protocol="direct", block="-") for r in raw]
    launches, waves, _ = inpair(cfg, seed, N_INPAIR)
    return rows, checks, stats, launches, waves


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", required=True, help="the pre-registration record (.json) with the points and pairs")
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=260.0, help="start no point after this many seconds")
    args = ap.parse_args(argv)
    plan = json.loads(Path(args.plan).read_text())
    import pandas as pd
    import torch

    from fa_split_inpair import save_inpair
    from xstage.hw.common.timing import gpu_clocks
    from xstage.provenance import provenance
    from xstage.records import atomic_write_text, save_records

    base = point_config({"M": 16384, "heads": 3, "head_dim": 128, "block_n": 128})
    pts = plan["points"]
    cfgs = [point_config(p) for p in pts]                        # validated before anything runs
    props = torch.cuda.get_device_properties(0)
    dev = {"name": props.name, "L2_cache_size": int(getattr(props, "L2_cache_size", -1)),
           "sm_count": int(props.multi_processor_count)}
    print(f"device: {dev}; clocks (sm, mem, temp, power, reasons): {gpu_clocks()}", flush=True)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    prov = provenance(with_gpu=True)
    meta = {"args": vars(args), "kernel": base.label(), "device": dev, "cuda": torch.version.cuda, "plan": plan,
            "provenance": prov,
            "n_direct": N_DIRECT, "n_inpair": N_INPAIR, "checks": [], "compile_stats": [], "points_done": []}
    t0 = time.time()
    rows, launches, waves = [], [], []
    for i, (p, cfg) in enumerate(zip(pts, cfgs)):
        if time.time() - t0 > args.budget_s:
            print(f"budget: {time.time() - t0:.0f} s > {args.budget_s:.0f} s; points from {i} left out", flush=True)
            break
        t_pt = time.time()
        tag = {"M": cfg.seq_len, "heads": cfg.heads, "head_dim": cfg.head_dim, "block_n": cfg.block_n}
        r, c, s, la, wa = measure_point(cfg, int(p["pairs_per_block"]), int(p["pairs_offset"]), 2 + i)
        rows += [dict(x, **tag) for x in r]
        launches += [dict(x, rep=0, **tag) for x in la]
        waves += [dict(x, rep=0, **tag) for x in wa]
        meta["checks"] += [dict(x, **tag) for x in c]
        meta["compile_stats"].append({**tag, **{f"{k}_{kk}": vv for k, v in s.items() for kk, vv in v.items()}})
        meta["points_done"].append({**tag, "seed": 2 + i, "wall_s": time.time() - t_pt, "clocks": gpu_clocks()})
        pr = pd.DataFrame(rows).assign(**{"fa(us)": lambda f: f["base_us"], "other(us)": lambda f: f["other_us"],
                                          "diff(us)": lambda f: f["other_us"] - f["base_us"]})
        pr = pr.drop(columns=["base_us", "other_us"])
        save_records(outdir / "rule19-pairs.parquet", "summary", pr, {"config": meta["args"], "provenance": prov},
                     table="frame", overwrite=True)
        for name, frame in (("inpair-launch", pd.DataFrame(launches)), ("inpair-wave", pd.DataFrame(waves))):
            save_inpair(outdir, name, frame, {"config": {"kernel": base.label(), "pairs": N_INPAIR},
                                               "provenance": prov})
        atomic_write_text(outdir / "rule19-meta.json", json.dumps(meta, indent=1, default=str), overwrite=True)
        x = pd.DataFrame(r)
        g = x[x["protocol"] == "graph"].assign(d=lambda f: f["other_us"] - f["base_us"])
        med = g.groupby(["variant", "block"])["d"].median()
        dr = x[x["protocol"] == "direct"].assign(d=lambda f: f["other_us"] - f["base_us"]).groupby("variant")["d"]
        print(f"{i} {cfg.seq_len}:{cfg.heads} d{cfg.head_dim} bn{cfg.block_n} N {p['pairs_per_block']}: fa "
              f"{g['base_us'].median():.0f} us; E A/B {med['fused_wb_split', 'A']:.0f}/{med['fused_wb_split', 'B']:.0f}"
              f", O A/B {med['split_hbm', 'A']:.0f}/{med['split_hbm', 'B']:.0f}; direct E/O "
              f"{dr.median()['fused_wb_split']:.0f}/{dr.median()['split_hbm']:.0f}; checks "
              f"{sum(bool(y['ok']) for y in c)}/{len(c)}; regs {json.dumps(s)} ({time.time() - t0:.0f} s)", flush=True)
    failed = [c for c in meta["checks"] if not c.get("ok")]
    print(f"checks: {len(meta['checks'])} rows, {len(failed)} failed; points {len(meta['points_done'])}/{len(pts)}; "
          f"wall {time.time() - t0:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
