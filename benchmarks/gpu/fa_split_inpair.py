"""Tile logs inside the paired timing, with the SM clock of every Q-loop (issue 15 item 5; attention-rule13.md).

Per (M, heads) point and repeat (interleaved as ``attention_triton_sweep5.py``: repeat r runs every point, the order
rotated by r, fresh inputs seed 2 + r):

1. ``attention_triton_heldout.measure`` as committed (checks, the six variants' timed rows and paired residuals over
   FA-only, one instrumented launch each): the standard residuals, scored as before.
2. In-pair blocks: FA-only and one fused kernel launched back to back ``--pairs`` times (order alternating, after a
   ~10 ms ``torch.cuda._sleep`` so the host queues ahead, no CUDA graph), EVERY launch instrumented
   (``launch_fa(tile_log=..., tile_clocks=True)``: per tile %globaltimer at Q-loop start / end and issue start / end,
   and the Q-loop's %clock64 cycles) and timed by CUDA events. Two blocks: ``fused_wb_split`` (to the host-mapped
   destinations) and ``split_hbm``, the same split tile-end build storing into device memory (the no-link control).
   So each launch's time, its tiles' timing and its SM clock belong to the same pair.

Records under ``--out`` (saved after every point): ``attention-kernel.parquet``, ``attention-tile.parquet`` (step 1's
instrumented launches, even SMs, repeat 0 only), ``attention-checks.json`` (``records.attention.save_run``);
``inpair-launch.parquet`` (one row per in-pair launch: event time, its pair's partner time, the log's makespan,
Q-loop time / cycles summed and per-program, the cycle-weighted SM clock, issue time), ``inpair-wave.parquet`` (per
launch and wave (the program's item index): tiles, Q-loop start / end quantiles, median Q-loop time, median MHz,
median issue time), ``inpair-tile.parquet`` (raw tiles of ``--raw-pairs`` pairs of repeat 0, even SMs, int32
32-ns ticks / cycles / 16): summary records of the free-form table "frame" (``save_inpair``, ``RECORD_COLUMNS``).

    python benchmarks/gpu/fa_split_inpair.py --out $OUT/r --points 49152:2,49152:4 --repeats 3 --pairs 8
"""

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


# the in-pair frames' columns as record columns (``xstage.records.spelling``: name(unit)); saved as summary records
# of the free-form table "frame" (``save_inpair``)
RECORD_COLUMNS = {
    "event_us": "event(us)", "partner_us": "partner(us)", "host_start_s": "host_start(s)", "host_end_s": "host_end(s)",
    "makespan_us": "makespan(us)", "qloop_us_prog_max": "qloop_prog_max(us)",
    "qloop_us_prog_mean": "qloop_prog_mean(us)", "issue_us_sum": "issue_sum(us)",
    "start_p10": "start_p10(us)", "start_p50": "start_p50(us)", "start_p90": "start_p90(us)",
    "end_p10": "end_p10(us)", "end_p50": "end_p50(us)", "end_p90": "end_p90(us)", "end_max": "end_max(us)",
    "qloop_us_p50": "qloop_p50(us)", "issue_us_p50": "issue_p50(us)"}


def as_record(frame):
    """``frame`` with ``RECORD_COLUMNS``' names; ``qloop_ns_sum`` as ``qloop_sum(us)``."""
    f = frame.rename(columns=RECORD_COLUMNS)
    if "qloop_ns_sum" in f.columns:
        f = f.assign(**{"qloop_sum(us)": f["qloop_ns_sum"] / 1e3}).drop(columns="qloop_ns_sum")
    return f


def save_inpair(outdir: Path, name: str, frame, meta: dict) -> None:
    """``<outdir>/<name>.parquet`` as a summary record (table "frame"), written to a temporary name and renamed."""
    from xstage.records import save_records

    save_records(outdir / f"{name}.parquet", "summary", as_record(frame), meta, table="frame", overwrite=True)


def points(text: str) -> list:
    """[(M, heads, head_dim, block_n)] of "M:heads[:head_dim:block_n],..." (head dim and block_n default 128)."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        parts = item.split(":")
        if len(parts) not in (2, 4) or not all(p.isdigit() for p in parts):
            raise SystemExit(f"--points: {item!r} must be M:heads or M:heads:head_dim:block_n")
        out.append(tuple(int(x) for x in parts + ["128", "128"][: 4 - len(parts)]))
    return out


def summarize(log: np.ndarray, plan_remote: np.ndarray) -> tuple:
    """(launch summary dict, per-wave rows, raw tile array) of one tile_clocks log (tiles, 8) int64."""
    from xstage.records.attention import decode_clock_field

    unlogged = int((log[:, 3] <= 0).sum())
    if unlogged:
        log, plan_remote = log[log[:, 3] > 0], plan_remote[log[:, 3] > 0]
    prog, cyc = decode_clock_field(log[:, 0])
    seq, l0, l1, i0, i1 = log[:, 2], log[:, 3], log[:, 4], log[:, 5], log[:, 6]
    t0 = l0.min()
    qns = (l1 - l0).astype(np.float64)
    ins = np.where(i1 > 0, i1 - i0, 0).astype(np.float64)
    end = np.maximum(l1, np.where(i1 > 0, i1, 0))
    per_prog_ns = np.bincount(prog, weights=qns, minlength=132)
    per_prog_cyc = np.bincount(prog, weights=cyc.astype(np.float64), minlength=132)
    summ = {"makespan_us": float((end.max() - t0) / 1e3), "qloop_ns_sum": float(qns.sum()),
            "qloop_cycles_sum": float(cyc.sum()), "mhz": float(cyc.sum() / qns.sum() * 1e3),
            "qloop_us_prog_max": float(per_prog_ns.max() / 1e3), "qloop_us_prog_mean": float(per_prog_ns.mean() / 1e3),
            "qloop_mcycles_prog_mean": float(per_prog_cyc.mean() / 1e6), "issue_us_sum": float(ins.sum() / 1e3),
            "tiles": int(len(log)), "remote_tiles": int(plan_remote.sum()), "unlogged": unlogged}
    waves = []
    for w in np.unique(seq):
        m = seq == w
        s, e = (l0[m] - t0) / 1e3, (l1[m] - t0) / 1e3
        waves.append({"wave": int(w), "tiles": int(m.sum()), "remote": int(plan_remote[m].sum()),
                      "start_p10": float(np.quantile(s, .1)), "start_p50": float(np.median(s)),
                      "start_p90": float(np.quantile(s, .9)), "end_p10": float(np.quantile(e, .1)),
                      "end_p50": float(np.median(e)), "end_p90": float(np.quantile(e, .9)), "end_max": float(e.max()),
                      "qloop_us_p50": float(np.median(qns[m]) / 1e3),
                      "mhz_p50": float(np.median(cyc[m] / qns[m] * 1e3)),
                      "issue_us_p50": float(np.median(ins[m]) / 1e3)})
    raw = np.stack([prog, seq, (l0 - t0) // 32, (l1 - t0) // 32, np.where(i1 > 0, (i1 - t0) // 32, -1),
                    cyc // 16, log[:, 1]], 1).astype(np.int32)
    return summ, waves, raw


def inpair(cfg, seed: int, pairs: int) -> tuple:
    """The two in-pair blocks of ``cfg`` (the module doc): (launch rows, wave rows, raw tiles by (block, launch))."""
    import torch

    from xstage.hw.attention import kernel as A
    from xstage.hw.attention.variants import kernel_variants, random_qkv
    from xstage.hw.common.timing import device, sync

    q, k, v = random_qkv(cfg, seed)
    dests = A.Destinations.emulated(cfg.layout, device())
    hbm = A.Destinations.in_device_memory(cfg.layout, device())
    out = torch.empty_like(q)
    _, variant_cfg = kernel_variants(cfg, q, k, v, out, dests.table)
    sc = variant_cfg["fused_wb_split"]
    plan = cfg.layout.tile_plan()
    remote = {"fa": np.zeros(len(plan), int), "fused_wb_split": plan["bytes_remote"].to_numpy() > 0,
              "split_hbm": np.zeros(len(plan), int)}
    n = cfg.layout.num_tiles
    logs = torch.zeros((2 * pairs, n, 8), dtype=torch.int64, device=device())

    def launcher(name):
        if name == "fa":
            return lambda lg: A.launch_fa(q, k, v, cfg, out=out, tile_log=lg, tile_clocks=True)
        table = dests.table if name == "fused_wb_split" else hbm.table
        return lambda lg: A.launch_fa(q, k, v, sc, dest_table=table, tile_log=lg, tile_clocks=True)

    fns = {x: launcher(x) for x in ("fa", "fused_wb_split", "split_hbm")}
    for x in fns.values():                     # compile / warm
        x(logs[0])
    sync()
    launches, waves, raws = [], [], {}
    for block in ("fused_wb_split", "split_hbm"):
        logs.zero_()
        ev = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(pairs)]
        names = []
        torch.cuda._sleep(20_000_000)
        t_host = time.time()
        for i in range(pairs):
            order = ("fa", block) if i % 2 == 0 else (block, "fa")
            names.append(order)
            ev[i][0].record()
            fns[order[0]](logs[2 * i])
            ev[i][1].record()
            fns[order[1]](logs[2 * i + 1])
            ev[i][2].record()
        sync()
        t_host_end = time.time()
        host = logs.cpu().numpy()
        for i in range(pairs):
            times = (ev[i][0].elapsed_time(ev[i][1]) * 1e3, ev[i][1].elapsed_time(ev[i][2]) * 1e3)
            for j, name in enumerate(names[i]):
                s, w, raw = summarize(host[2 * i + j], np.asarray(remote[name], bool))
                row = {"block": block, "pair": i, "pos": j, "variant": name, "event_us": times[j],
                       "partner_us": times[1 - j], "host_start_s": t_host, "host_end_s": t_host_end, **s}
                launches.append(row)
                waves += [dict(x, block=block, pair=i, pos=j, variant=name) for x in w]
                raws[(block, i, j, name)] = raw
    return launches, waves, raws


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--points", required=True,
                    help="comma-separated M:heads[:head_dim:block_n] (head dim and block_n default 128)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--raw-pairs", type=int, default=2, help="raw tiles kept of the first N pairs of repeat 0")
    args = ap.parse_args(argv)
    pts = points(args.points)
    if args.repeats < 1 or args.pairs < 2:
        raise SystemExit(f"--repeats {args.repeats} / --pairs {args.pairs}: need >= 1 / >= 2")
    import pandas as pd
    import torch

    from attention_triton_heldout import measure
    from attention_triton_sweep5 import order
    from xstage.hw.attention.config import AttentionConfig
    from xstage.hw.common.timing import gpu_clocks
    from xstage.provenance import provenance
    from xstage.records import atomic_write_text
    from xstage.records.attention import save_run

    base = AttentionConfig(16384, 3, 128, 8, block_n=128, num_stages=3, tma=True, store_cache=".wt",
                           stagger=True, split_tail=True)
    cfgs = [replace(base, seq_len=M, heads=h, head_dim=d, block_n=bn) for M, h, d, bn in pts]   # validated first
    props = torch.cuda.get_device_properties(0)
    dev = {"name": props.name, "L2_cache_size": int(getattr(props, "L2_cache_size", -1)),
           "sm_count": int(props.multi_processor_count)}
    print(f"device: {dev}; clocks (sm, mem, temp, power, reasons): {gpu_clocks()}", flush=True)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rows, tiles, checks, launches, waves, raws = [], [], [], [], [], []
    inpair_ok = True
    meta = {"args": vars(args), "kernel": base.label(), "device": dev, "points": pts}
    for rep in range(args.repeats):
        for cfg in order(cfgs, rep):
            r, t, c = measure(cfg, args.trials, seed=2 + rep)
            for x in r + c:
                x["rep"] = rep
            if rep == 0:
                tiles += [f[f["sm"] % 2 == 0].assign(rep=rep, heads=cfg.heads, head_dim=cfg.head_dim,
                                                     block_n=cfg.block_n) for f in t]
            rows, checks = rows + r, checks + c
            la, wa, ra = [], [], {}
            if inpair_ok:
                try:
                    la, wa, ra = inpair(cfg, 2 + rep, args.pairs)
                except Exception as e:          # keep step 1's records; the in-pair blocks are not retried
                    import traceback
                    traceback.print_exc()
                    print(f"in-pair blocks failed at M={cfg.seq_len} H={cfg.heads}: {e!r}; skipped from here on",
                          flush=True)
                    inpair_ok = False
            tag = {"rep": rep, "M": cfg.seq_len, "heads": cfg.heads, "head_dim": cfg.head_dim, "block_n": cfg.block_n}
            launches += [dict(x, **tag) for x in la]
            waves += [dict(x, **tag) for x in wa]
            if rep == 0:
                for (block, i, j, name), raw in ra.items():
                    if i < args.raw_pairs:
                        keep = raw[raw[:, 6] % 2 == 0]
                        raws.append(pd.DataFrame(keep[:, :6], columns=["program", "wave", "loop_start_t32",
                                                                         "loop_end_t32", "issue_end_t32",
                                                                         "cycles_16"]).assign(
                            block=block, pair=i, pos=j, variant=name, **tag))
            save_run(outdir, rows, tiles, checks, meta, overwrite=True)
            for name, frame in (("inpair-launch", pd.DataFrame(launches)), ("inpair-wave", pd.DataFrame(waves)),
                                ("inpair-tile", pd.concat(raws, ignore_index=True) if raws else pd.DataFrame())):
                if name == "inpair-wave" and len(frame):
                    fl = [c for c in frame.columns if frame[c].dtype == np.float64]
                    frame[fl] = frame[fl].astype(np.float32)
                if frame.empty:
                    continue
                save_inpair(outdir, name, frame, {"config": meta, "provenance": provenance()})
            fa = next(x for x in r if x["variant"] == "fa")["time(us)"]
            lf = pd.DataFrame(la)
            d = {"fused_wb_split": "-", "split_hbm": "-"}
            for block in (("fused_wb_split", "split_hbm") if la else ()):
                b = lf[lf["block"] == block]
                ev = {x: b[b["variant"] == x].set_index("pair")["event_us"] for x in (block, "fa")}
                diff = ev[block] - ev["fa"]
                mhz = b.groupby("variant")["mhz"].median()
                d[block] = f"{float(diff.median()):.0f} us (MHz fa {mhz['fa']:.0f} / {mhz[block]:.0f})"
            print(f"rep {rep} M={cfg.seq_len} H={cfg.heads} d={cfg.head_dim} bn={cfg.block_n}: fa {fa:.0f} us, "
                  + ", ".join(f"{x['variant']} {x['paired_minus_fa(us)']:.0f}" for x in r if "paired_minus_fa(us)" in x)
                  + f"; in-pair split {d['fused_wb_split']}, split_hbm {d['split_hbm']} ({time.time() - t0:.0f}s)",
                  flush=True)
    atomic_write_text(outdir / "inpair-meta.json", json.dumps({**meta, "provenance": provenance()}, indent=1),
                      overwrite=True)
    failed = [c for c in checks if c.get("ok") is False]
    print(f"checks: {len(checks)} rows, {len(failed)} failed; wall {time.time() - t0:.0f}s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
