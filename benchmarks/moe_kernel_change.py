"""What the early_rows + prefetch kernel changed, seen by the replay's inputs: two MoE runs side by side.

For the configurations in both ``--old`` (default ``data/moe/run-d815b94``) and ``--new`` (``run-7c8dfb2-quack``):
the kernel options (BLOCK_N, rows side by side, programs per SM, early_rows, prefetch), the per-tile medians the
replay reads (``measured_l1(us)`` ... with local stores), the remote bytes per Linear-2 tile, and the measured
speedups. Then the committed tile-log samples (``moe-tile-small.parquet``) of both runs, per schedule and kind:
the gap from mainloop end to the first store (``issue_start - mainloop_end``), the logged store span, the
mainloop with remote stores after the program's own remote tile against the local-store mainloop, and the
per-program rate that slow-down implies (L2 bytes / extra time). Prints only.

    python benchmarks/moe_kernel_change.py [--old data/moe/run-d815b94] [--new data/moe/run-7c8dfb2-quack]
"""

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from moe_magnitudes import load_tiles, short
from xstage.compare.moe_records import load_kernel_records, per_config
from xstage.errors import InputError, exit_with
from xstage.paths import data_dir

MEDIANS = ["measured_l1(us)", "measured_l2(us)", "measured_l1_epilogue(us)", "measured_l2_epilogue(us)"]


def run_table(folder: Path) -> pd.DataFrame:
    k = load_kernel_records(folder)
    inter = k[k["variant"] == "interleaved"].drop_duplicates("config", keep="last").set_index("config")
    c = per_config(k).set_index("config")
    out = inter[MEDIANS].copy()
    out["block_n"] = inter["block_n"]
    for col, default in (("group_rows", 1), ("programs_per_sm", 1), ("kernel_early_rows", False),
                         ("kernel_prefetch", False)):
        out[col] = inter[col] if col in inter else default
    out["speedup"] = c["speedup_interleaved"]
    return out


def tile_table(folder: Path) -> pd.DataFrame:
    t = load_tiles(folder, "moe-tile-small.parquet")
    t["to_store(us)"] = t["issue_start(us)"] - t["mainloop_end(us)"]
    rows = []
    for (cfg, sched), f in t[~t["schedule"].str.endswith("_local")].groupby(["config", "schedule"]):
        loc = t[(t["config"] == cfg) & (t["schedule"] == f"{sched}_local")]
        for kind, g in f.groupby("kind", observed=True):
            base = float(loc.loc[loc["kind"] == kind, "ml(us)"].median())
            after = g[g["after_remote"]]
            extra = float(after["ml(us)"].median()) - base if len(after) else np.nan
            b = float(t.loc[(t["config"] == cfg) & (t["bytes_remote"] > 0), "bytes_remote"].median())
            rows.append({"config": short(cfg), "schedule": sched, "kind": kind,
                         "to_store_local": float(loc.loc[loc["kind"] == kind, "to_store(us)"].median()),
                         "to_store_remote": float(g["to_store(us)"].median()),
                         "span_remote": float(g.loc[g["bytes_remote"] > 0, "span(us)"].median()) if kind == "L2" else np.nan,
                         "ml_local": base, "ml_after_own_remote": float(after["ml(us)"].median()) if len(after) else np.nan,
                         "n_after": len(after), "extra_us": extra,
                         "implied_GBps_per_program": b / extra / 1e3 if extra and extra > 0 else np.nan})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default=None)
    ap.add_argument("--new", default=None)
    args = ap.parse_args(argv)
    old = Path(args.old) if args.old else data_dir() / "moe" / "run-d815b94"
    new = Path(args.new) if args.new else data_dir() / "moe" / "run-7c8dfb2-quack"
    for flag, f in (("--old", old), ("--new", new)):
        if not f.is_dir():
            raise InputError(flag, str(f), "is not a folder")
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    a, b = run_table(old), run_table(new)
    both = sorted(set(a.index) & set(b.index))
    j = a.loc[both].add_suffix("_old").join(b.loc[both].add_suffix("_new"))
    cols = [f"{c}_{s}" for c in ["block_n", "group_rows", "programs_per_sm", "measured_l1(us)", "measured_l2(us)",
                                 "measured_l1_epilogue(us)", "measured_l2_epilogue(us)", "speedup"] for s in ("old", "new")]
    print(f"Configurations in both runs ({len(both)}): {old.name} -> {new.name}")
    print(j[cols].rename(index=short).round(3).to_string())
    for name, frame in ((old.name, a), (new.name, b)):
        g = frame.groupby(["block_n", "programs_per_sm"])[MEDIANS].median()
        print(f"\n{name}: medians over its configurations by BLOCK_N and programs per SM")
        print(g.round(3).to_string())
    for folder in (old, new):
        print(f"\nTile-log sample {folder.name}/moe-tile-small.parquet (us):")
        print(tile_table(folder).round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    exit_with(main, "moe_kernel_change.py")
