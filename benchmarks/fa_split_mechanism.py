"""What differs when the split tile-end Triton kernel hides its stores (M >= ~56K): the checks on the committed records.

Issue 15 item 5; ``docs/calibration/attention-mechanism.md``. Post hoc: nothing here is fitted or judged, it reads the
committed Triton runs (``RUNS``; their kernel records and tile logs) and the clock diagnostics of 6c1c349-heldout2
and prints, per check, the figures the page quotes:

    composition  the local / remote make-up of every wave, derived from the kernel's tile order (own chunk last,
                 split tail in halves: ``sim.schedule_fa.fa_work_items``, the replay's order), per committed
                 configuration of ``fused_wb_split``, with its measured residual; configurations of equal make-up
                 (the same tiles heads x M / block_m, programs and W) with opposite outcomes rule the make-up out
    order        the replay's order and destinations against every logged tile: (head, m-block) at each program's
                 place, and the remote bytes of each tile
    stall        where the split kernel's time goes in its instrumented launch: the stores' issue time, the per-wave
                 mainloop over FA-only's, and, in the one wave that mixes them, the mainloop of programs whose
                 previous tile stayed local against those whose tile went to the host
    drift        the split kernel's per-program speed: its spread (sd of a program's mean mainloop over the wave
                 median, %) and its persistence (median wave-to-wave correlation)
    clock        the clock state of each row (the nvidia-smi reading right after its paired timing: SM MHz and the
                 SW power-cap flag), the instrumented FA launch (after that nvidia-smi call) over the timed one,
                 the unpaired medians' split - FA beside the paired residual, and the clock diagnostics' idle-gap
                 and back-to-back figures

    python benchmarks/fa_split_mechanism.py [--out data/predictions/fa-split-mechanism-h200-pcie-host.json]
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import predict_pers_fa4 as PP  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.paths import data_dir  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import atomic_write_text, load_records  # noqa: E402
from xstage.sim.predict_congestion import item_ends  # noqa: E402
from xstage.sim.schedule_fa import fa_work_items, local_last_order  # noqa: E402
from xstage.sim.schedules import TILE_M_BLOCK, TILE_ROW  # noqa: E402

RUNS = ("attention", "attention-fa4/triton", "attention-runs/49d9e81", "attention-runs/7531682-heldout",
        "attention-runs/6c1c349-heldout2", "attention-runs/63fb3ec-heldout3", "attention-runs/ad8f0af-heldout4",
        "attention-runs/b4fb3a7-heldout5")
CLOCK = ("attention-runs/6c1c349-heldout2/clock/clock-diag.json",
         "attention-runs/6c1c349-heldout2/clock2/clock-diag.json")
SPLIT, FA, HIDDEN = "fused_wb_split", "fa", "fused_wb_split_stagger"
CONFIG = ("M", "heads", "head_dim", "block_n")
PROGRAMS, WORLD, BLOCK_M = 132, 8, 128          # every committed Triton run: one H200, W = 8 emulated, bm 128
CAP_FLAG = 0x4                                   # nvidia-smi clocks_event_reasons: SW power cap


def composition(heads: int, seq_len: int, *, programs: int = PROGRAMS, world_size: int = WORLD, rank: int = 0,
                block_m: int = BLOCK_M, split: bool = True) -> dict:
    """The local / remote make-up of the kernel's waves (own chunk last; with ``split`` the last partial wave in
    K/V halves, only the owning half storing): per wave of ``programs`` items its items, remote and local tiles, and
    the tiles, whole waves, tail, local tiles, the wave of the last remote store, the remote tiles in it and the
    compute left after it (Q-loops, programs in lockstep). ``key`` is the per-wave make-up, comparable between
    configurations."""
    sched, share, owner = fa_work_items(heads, seq_len, programs, block_m=block_m, order="local_last",
                                        world_size=world_size, rank=rank, tail_parts=2 if split else 1)
    item = sched.tiles[:, TILE_ROW].astype(np.int64)
    chunk = sched.tiles[:, TILE_M_BLOCK].astype(np.int64) * block_m // (seq_len // world_size)
    remote, local = owner & (chunk != rank), owner & (chunk == rank)
    wave = item // programs
    waves = [(int((wave == w).sum()), int(remote[wave == w].sum()), int(local[wave == w].sum()))
             for w in range(int(wave.max()) + 1)]
    ends = item_ends(sched, share)
    last = int(item[remote].max()) if remote.any() else -1
    tiles = heads * seq_len // block_m
    return {"tiles": tiles, "full_waves": tiles // programs, "tail": tiles % programs, "local_tiles": int(local.sum()),
            "last_remote_wave": last // programs if last >= 0 else None,
            "remote_in_last_remote_wave": waves[last // programs][1] if last >= 0 else 0,
            "qloops_after_last_remote": float(ends.max() - ends[item == last][0]) if last >= 0 else None,
            "waves": waves, "key": tuple(waves)}


def kernel_frame(base: Path, runs=RUNS) -> pd.DataFrame:
    """Every committed kernel row of ``runs`` (column ``run``; ``rep`` 0 where the run has no repeats)."""
    out = []
    for n in runs:
        k = load_records(base / n / "attention-kernel.parquet", "kernel")[0]
        out.append(k.assign(run=n, rep=k["rep"] if "rep" in k.columns else 0))
    return pd.concat(out, ignore_index=True)


def tile_frame(base: Path, kernel: pd.DataFrame, runs=RUNS) -> pd.DataFrame:
    """Every committed tile row of ``runs``, with the configuration columns (``CONFIG``; from the run's FA-only kernel
    rows by M where the tile log lacks them) and ``rep`` 0 where the run has no repeats."""
    out = []
    for n in runs:
        t = load_records(base / n / "attention-tile.parquet", "tile")[0]
        t = t.assign(run=n, rep=t["rep"] if "rep" in t.columns else 0)
        fa = kernel[(kernel["run"] == n) & (kernel["variant"] == FA)].drop_duplicates(list(CONFIG))
        missing = [c for c in CONFIG[1:] if c not in t.columns]
        if missing:
            if fa["M"].duplicated().any():
                raise InputError("runs", n, f"lacks tile columns {missing} and holds one M at two configurations")
            t = t.merge(fa[["M"] + missing], on="M", how="left")
        out.append(t)
    return pd.concat(out, ignore_index=True)


def residuals(kernel: pd.DataFrame, variant: str = SPLIT) -> pd.DataFrame:
    """Per configuration: the paired residual of ``variant`` over its repeats (median, min, max, n) and the FA-only
    time (median)."""
    k = kernel[(kernel["variant"] == variant) & (kernel["num_stages"] == 3) & kernel["config"].str.contains(",tma")]
    fa = kernel[kernel["variant"] == FA].groupby(list(CONFIG))["time(us)"].median().rename("fa_us")
    g = k.groupby(list(CONFIG))["paired_minus_fa(us)"].agg(["median", "min", "max", "count"])
    return g.join(fa).reset_index()


def composition_rows(kernel: pd.DataFrame) -> list:
    """``composition`` of every committed configuration of the split kernel beside its measured residual; ``twins``:
    the other configurations of identical make-up and their residuals."""
    rows = []
    for r in residuals(kernel).itertuples(index=False):
        c = composition(int(r.heads), int(r.M))
        rows.append({**{k: int(getattr(r, k)) for k in CONFIG}, "residual_us": float(r.median),
                     "residual_min_us": float(r.min), "residual_max_us": float(r.max), "n": int(r.count),
                     "fa_us": float(r.fa_us), **{k: v for k, v in c.items() if k not in ("waves", "key")},
                     "_key": c["key"]})
    for r in rows:
        r["twins"] = [{k: o[k] for k in CONFIG + ("residual_us",)} for o in rows
                      if o is not r and o["_key"] == r["_key"] and (o["heads"], o["M"]) != (r["heads"], r["M"])]
    for r in rows:
        del r["_key"]
    return rows


def order_check(tiles: pd.DataFrame) -> dict:
    """The replay's (head, m-block) at each logged tile's program and place, and its remote bytes, against the log:
    tiles checked and mismatches. A split tile's row is its merging part's (program, place)."""
    n = bad = nbytes = bad_bytes = 0
    for (M, heads, d, cfg), f in tiles.groupby(["M", "heads", "head_dim", "config"]):
        mb = int(M) // BLOCK_M
        total = int(heads) * mb
        head, m_block = local_last_order(int(heads), mb, mb // WORLD, 0)
        tail = total % PROGRAMS
        parts = 2 if ("split-tail" in cfg and tail) else 1
        n_full = total - tail if parts > 1 else total
        item = f["seq"].to_numpy() * PROGRAMS + f["program"].to_numpy()
        pos = np.where(item >= n_full, n_full + (item - n_full) // parts, item)
        ok = pos < total
        ok[ok] = (head[pos[ok]] == f["n"].to_numpy()[ok]) & (m_block[pos[ok]] == f["m"].to_numpy()[ok])
        n, bad = n + len(f), bad + int((~ok).sum())
        fused = (f["schedule"] != FA) & ~f["schedule"].str.contains("hbm")
        remote = f["m"].to_numpy() * BLOCK_M // (int(M) // WORLD) != 0
        want = np.where(remote, BLOCK_M * int(d) * 2, 0)[fused.to_numpy()]
        nbytes += int(fused.sum())
        bad_bytes += int((want != f["bytes_remote"].to_numpy()[fused.to_numpy()]).sum())
    return {"tiles": n, "order_mismatches": bad, "fused_tiles": nbytes, "remote_bytes_mismatches": bad_bytes}


def _whole(tiles: pd.DataFrame) -> pd.DataFrame:
    t = tiles[~tiles["split"].astype(bool) & (tiles["rep"] == tiles.groupby("run")["rep"].transform("min"))]
    return t.assign(ml=t["mainloop_end(us)"] - t["mainloop_start(us)"], iss=t["issue_end(us)"] - t["issue_start(us)"])


def _full_waves(f: pd.DataFrame) -> list:
    n = f.groupby("seq").size()
    return [int(s) for s in n.index if n[s] >= 0.9 * n.max()]


def stall_rows(tiles: pd.DataFrame) -> list:
    """Per instrumented configuration (repeat 0): the split kernel's median / max store issue time, its per-wave
    median mainloop minus FA-only's and minus the hidden split+stagger build's (whole waves), and, in the wave that
    follows the one mixing remote and local tiles, the median mainloop after a remote tile minus after a local one."""
    t = _whole(tiles)
    rows = []
    for key, f in t.groupby(["run"] + list(CONFIG)):
        s = f[f["schedule"] == SPLIT]
        if s.empty:
            continue
        waves = [w for w in _full_waves(s)]
        med = f.groupby(["schedule", "seq"])["ml"].median()
        row = {"run": key[0], **{k: int(v) for k, v in zip(CONFIG, key[1:])},
               "issue_median_us": float(s["iss"].median()), "issue_max_us": float(s["iss"].max()),
               "over_fa_us": [round(float(med[SPLIT][w] - med[FA][w]), 1) for w in waves if (FA, w) in med.index],
               "over_split_stagger_us": [round(float(med[SPLIT][w] - med[HIDDEN][w]), 1) for w in waves
                                         if (HIDDEN, w) in med.index]}
        s = s.sort_values(["program", "seq"])
        prev = s.groupby("program")["bytes_remote"].shift(1)
        for w in waves:
            sel = (s["seq"] == w).to_numpy() & prev.notna().to_numpy()
            after_remote, after_local = s["ml"][sel & (prev > 0).to_numpy()], s["ml"][sel & (prev == 0).to_numpy()]
            if len(after_remote) and len(after_local):
                row["mixed"] = {"wave": w, "after_remote": len(after_remote), "after_local": len(after_local),
                                "diff_us": round(float(after_remote.median() - after_local.median()), 1)}
        rows.append(row)
    return rows


def drift_rows(tiles: pd.DataFrame, schedules=(SPLIT, FA)) -> list:
    """Per instrumented configuration and schedule: the sd of the programs' mean mainloop over the wave medians (%,
    whole waves from the second) and the median wave-to-wave correlation of the programs' relative mainloops."""
    t = _whole(tiles)
    rows = []
    for key, f in t.groupby(["run"] + list(CONFIG)):
        row = {"run": key[0], **{k: int(v) for k, v in zip(CONFIG, key[1:])}}
        for s in schedules:
            g = f[f["schedule"] == s]
            waves = [w for w in _full_waves(g) if w >= 1] if len(g) else []
            if len(waves) < 3:
                continue
            rel = g[g["seq"].isin(waves)].pivot_table(index="program", columns="seq", values="ml")[waves].dropna()
            rel = rel / rel.median(axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):   # programs of equal speed: no correlation (NaN)
                corr = [np.corrcoef(rel[a], rel[b])[0, 1] for a, b in zip(waves[:-1], waves[1:])]
            row[f"{s}_speed_sd_pct"] = round(100 * float(rel.mean(axis=1).std()), 3)
            row[f"{s}_persistence"] = round(float(np.median(corr)), 3)
        if len(row) > 1 + len(CONFIG):
            rows.append(row)
    return rows


def smi_state(text) -> dict:
    """SM MHz and the SW power-cap flag of an nvidia-smi reading "sm MHz, mem MHz, temp, power W, reasons"."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) < 5 or not parts[0].endswith("MHz"):
        raise InputError("clocks", text, "must read 'sm MHz, mem MHz, temp, power W, reasons'")
    return {"sm_MHz": int(parts[0].split()[0]), "power_W": float(parts[3].split()[0]),
            "capped": bool(int(parts[4], 16) & CAP_FLAG)}


def clock_rows(kernel: pd.DataFrame, tiles: pd.DataFrame) -> list:
    """Per configuration and repeat with a split row: the clock state read right after its paired timing, the
    instrumented FA launch's makespan (after that reading) over the timed FA median, and the split kernel's unpaired
    median minus FA-only's beside its paired residual."""
    k = kernel[(kernel["num_stages"] == 3) & kernel["config"].str.contains(",tma")]
    ends = tiles[tiles["schedule"] == FA].groupby(["run", "rep"] + list(CONFIG))["mainloop_end(us)"].max()
    rows = []
    for key, g in k.groupby(["run", "rep"] + list(CONFIG)):
        g = g.drop_duplicates("variant", keep="last").set_index("variant")
        if SPLIT not in g.index or FA not in g.index:
            continue
        st = smi_state(g.loc[SPLIT, "clocks_after"])
        fa = float(g.loc[FA, "time(us)"])
        rows.append({"run": key[0], "rep": int(key[1]), **{c: int(v) for c, v in zip(CONFIG, key[2:])}, "fa_us": fa,
                     **st, "paired_us": float(g.loc[SPLIT, "paired_minus_fa(us)"]),
                     "unpaired_us": float(g.loc[SPLIT, "time(us)"]) - fa,
                     "instr_fa_over_timed": float(ends[key]) / fa if key in ends.index else None})
    return rows


def clock_diag(base: Path, paths=CLOCK) -> list:
    """The clock diagnostics: per M, the idle-gap pairs' median residual of each fused kernel, and the back-to-back
    blocks' FA-only and split times (each block's first and last four launches, median)."""
    rows = []
    for p in paths:
        d = json.loads((base / p).read_text())
        for run in d["runs"]:
            row = {"file": p, "M": int(run["M"])}
            for v, pairs in run["gapped"].items():
                row[f"gapped_{v}_us"] = float(np.median([x["diff_us"] for x in pairs]))
                row[f"gapped_{v}_pairs_us"] = [round(float(x["diff_us"])) for x in pairs]
            for b in run["blocks"]:
                if b["variant"] in (FA, SPLIT):
                    row[f"block{b['rep']}_{b['variant']}_first4_us"] = float(np.median(b["us"][:4]))
                    row[f"block{b['rep']}_{b['variant']}_last4_us"] = float(np.median(b["us"][-4:]))
            rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the figures as a JSON record (never overwritten)")
    args = ap.parse_args(argv)
    if args.out and Path(args.out).exists():
        raise InputError("--out", args.out, "already exists (records are never overwritten)")
    base = data_dir()
    kernel = kernel_frame(base)
    tiles = tile_frame(base, kernel)
    comp, order, stall = composition_rows(kernel), order_check(tiles), stall_rows(tiles)
    drift, clocks, diag = drift_rows(tiles), clock_rows(kernel, tiles), clock_diag(base)
    print("composition (split kernel; own chunk last, tail in halves; residual median [min, max] over n):")
    for r in comp:
        twins = "; ".join(f"{t['heads']}h {t['M']}: {t['residual_us']:.0f}" for t in r["twins"])
        print(f"  {r['heads']}h d{r['head_dim']} bn{r['block_n']} M {r['M']:>6}: tiles {r['tiles']:>4} waves "
              f"{r['full_waves']:>2}+{r['tail']:>3} local {r['local_tiles']:>3}, last remote wave "
              f"{r['last_remote_wave']}"
              f" ({r['remote_in_last_remote_wave']} remote), {r['qloops_after_last_remote']:.1f} Q-loops after; "
              f"residual {r['residual_us']:.0f} [{r['residual_min_us']:.0f}, {r['residual_max_us']:.0f}] n {r['n']}"
              + (f"  == same make-up as {twins}" if twins else ""))
    print(f"order: {order}")
    print("stall (split kernel, instrumented launch): issue median / max us; per-wave mainloop over FA-only; "
          "over split+stagger; mixed wave")
    for r in stall:
        print(f"  {r['run']:>32} {r['heads']}h d{r['head_dim']} bn{r['block_n']} M {r['M']:>6}: issue "
              f"{r['issue_median_us']:.1f} / {r['issue_max_us']:.1f}; {r['over_fa_us']}; {r['over_split_stagger_us']}"
              + (f"; {r['mixed']}" if "mixed" in r else ""))
    print("drift (per-program speed sd %, persistence):")
    for r in drift:
        print(f"  {r['run']:>32} {r['heads']}h d{r['head_dim']} bn{r['block_n']} M {r['M']:>6}: "
              + ", ".join(f"{s} {r.get(f'{s}_speed_sd_pct', float('nan')):.2f} % / "
                          f"{r.get(f'{s}_persistence', float('nan')):.2f}" for s in (SPLIT, FA)))
    print("clock (after the paired timing): MHz, capped; instrumented FA / timed; split paired / unpaired us:")
    for r in clocks:
        instr = "-" if r["instr_fa_over_timed"] is None else f"{r['instr_fa_over_timed']:.3f}"
        print(f"  {r['run']:>32} rep {r['rep']} {r['heads']}h d{r['head_dim']} bn{r['block_n']} M {r['M']:>6} FA "
              f"{r['fa_us']:7.0f}: {r['sm_MHz']} MHz {'capped' if r['capped'] else 'free  '} {r['power_W']:.0f} W; "
              f"instr {instr}; paired {r['paired_us']:5.0f} unpaired {r['unpaired_us']:5.0f}")
    for r in diag:
        print(f"  clock diagnostics M {r['M']}: " + ", ".join(f"{k} {v:.0f}" for k, v in r.items()
                                                             if isinstance(v, float)))
    if args.out:
        record = {"what": "the split tile-end Triton kernel's hiding from M ~56K: the checks on the committed records "
                          "(post hoc, nothing fitted; docs/calibration/attention-mechanism.md)",
                  "platform": "h200-pcie-host", "tolerance": PP.TOLERANCE, "runs": list(RUNS), "clock": list(CLOCK),
                  "composition": comp, "order": order, "stall": stall, "drift": drift, "clock_rows": clocks,
                  "clock_diagnostics": diag, "provenance": provenance()}
        atomic_write_text(Path(args.out), json.dumps(record, indent=None, separators=(",", ":")) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_split_mechanism.py")
