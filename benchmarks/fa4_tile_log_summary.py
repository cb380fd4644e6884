"""The persistent FA4 kernels' tile logs summarised: does CTA drift explain which kernels hide their last sends?

    python benchmarks/fa4_tile_log_summary.py data/attention-fa4/pers7-tilelog \
        [--json data/attention-fa4/pers7-tilelog/tile-log-summary.json] [--gbps 52.5]

Reads ``tile-log.parquet`` and ``tile-log-run.json`` of a ``benchmarks/gpu/fa4_tile_log.py`` run. Per kernel, M and
mode ("fa" / "fused"), the median over its logged launches of ``fa4_tile_log.launch_summary``: the spread of the CTA
end times per wave (range, IQR) and its growth per wave (us, and over the median mainloop: the predictor's
``program_spread``), the last (and second-to-last) wave's end-time range against the drain of its remote bytes at
``--gbps`` (the project's PCIe write rate), and a FIFO replay of the logged remote sends. Beside them: the log's time
cost and the residual of this run (fused - FA-only medians, log off), and the kernels' own paired residuals of the
sweep records (``--records``: paired(fused_vmm_pers_<k>) - paired(pfa4_<k>), median over the folders that hold it).
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from xstage.errors import InputError, exit_with
from xstage.hw.attention import fa4_tile_log as T
from xstage.provenance import provenance
from xstage.records import atomic_write_text

RECORDS = ("pers4", "pers5", "pers5b", "pers6", "pers6b")
KEEP = ("compute_span_us", "drift.range_slope_us", "drift.iqr_slope_us", "drift.mainloop_us", "drift.range_per_wave",
        "drift.iqr_per_wave", "last_wave.units", "last_wave.remote_sends", "last_wave.drain_us",
        "last_wave.end_range_us", "last_wave.end_iqr_us", "last_wave.send_range_us", "second_last_wave.remote_sends",
        "second_last_wave.drain_us", "second_last_wave.end_range_us", "second_last_wave.send_range_us",
        "queue.link_done_after_end_us", "queue.unfinished_at_end_sends")


def flat(d: dict, key: str):
    for part in key.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def median_of(summaries: list) -> dict:
    """Each ``KEEP`` figure's median over the launches (None where no launch has it)."""
    out = {}
    for key in KEEP:
        vals = [flat(s, key) for s in summaries]
        vals = [v for v in vals if v is not None]
        out[key] = float(np.median(vals)) if vals else None
    return out


def record_residuals(root: Path) -> dict:
    """{(kernel, M): own paired residual (us)} over the sweep folders under ``root`` (median over folders)."""
    from xstage.records import load_records

    got = {}
    for name in RECORDS:
        path = root / name / "attention-fa4-kernel.parquet"
        if not path.exists():
            continue
        frame, _ = load_records(path, "kernel")
        for M, g in frame.groupby("M"):
            g = g.drop_duplicates("variant", keep="last").set_index("variant")["paired_minus_fa(us)"]
            for fused in [v for v in g.index if v.startswith("fused_vmm_pers")]:
                kern = fused[len("fused_vmm_pers_"):] or "drain"
                fa = "pfa4" if kern == "drain" else f"pfa4_{kern}"
                if fa in g.index:
                    got.setdefault((kern, int(M)), []).append(float(g[fused] - g[fa]))
    return {k: float(np.median(v)) for k, v in got.items()}


def summarise(frame, run: dict, gbps: float, residuals: dict) -> list:
    cfg = run["config"]
    by_row = {(r["kernel"], r["M"]): r for r in run["rows"] if "kernel" in r}
    out = []
    for (kern, M, mode), g in frame.groupby(["kernel", "M", "mode"], sort=True):
        blocks = int(M) // 128
        sums = [T.launch_summary({c: np.asarray(f[c]) for c in ("cta", "slot", *T.LOG_FIELDS)}, blocks,
                                 cfg["world_size"], cfg["rank"], gbps) for _, f in g.groupby("launch")]
        r = by_row.get((kern, int(M)), {})
        row = {"kernel": kern, "M": int(M), "mode": mode, "launches": len(sums), **median_of(sums),
               "launch_us_log": float(g.groupby("launch")["launch_us"].first().median()),
               "us_nolog": r.get(f"{mode}_us_nolog"), "us_log": r.get(f"{mode}_us_log"),
               "log_cost_us": r.get(f"{mode}_log_cost_us"), "checks_ok": r.get("ok")}
        if mode == "fused":
            row["run_residual_us"] = (r["fused_us_nolog"] - r["fa_us_nolog"]) if "fa_us_nolog" in r else None
            row["records_residual_us"] = residuals.get((kern, int(M)))
        out.append(row)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--json", default=None, help="output (default: <folder>/tile-log-summary.json)")
    p.add_argument("--gbps", type=float, default=52.5)
    p.add_argument("--records", default=None, help="folder holding the sweep folders (default: the run's parent)")
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    folder = Path(args.folder)
    for name in ("tile-log.parquet", "tile-log-run.json"):
        if not (folder / name).exists():
            raise InputError("folder", str(folder), f"has no {name}")
    if not args.gbps > 0:
        raise InputError("--gbps", args.gbps, "must be > 0")
    out = Path(args.json) if args.json else folder / "tile-log-summary.json"
    if out.exists() and not args.overwrite:
        raise InputError("--json", str(out), "already exists (pass --overwrite to replace it)")
    import pandas as pd

    frame = pd.read_parquet(folder / "tile-log.parquet")
    run = json.loads((folder / "tile-log-run.json").read_text())
    residuals = record_residuals(Path(args.records) if args.records else folder.parent)
    rows = summarise(frame, run, args.gbps, residuals)
    for r in rows:
        print(f"{r['kernel']:>14} {r['M']:>6} {r['mode']:>5}  drift/wave {r['drift.range_per_wave']}  last wave: "
              f"end range {r['last_wave.end_range_us']:.1f} us, drain {r['last_wave.drain_us']:.1f} us; "
              f"replay {r['queue.link_done_after_end_us']:.1f} us; log cost {r['log_cost_us']}")
    doc = {"what": "per-CTA tile-log figures of the persistent FA4 kernels (median over logged launches)",
           "source": str(folder), "gbps": args.gbps, "rows": rows, "run_provenance": run.get("provenance"),
           "provenance": provenance()}
    atomic_write_text(out, json.dumps(doc, indent=1), overwrite=args.overwrite)
    return 0


if __name__ == "__main__":
    exit_with(main, "fa4_tile_log_summary")
