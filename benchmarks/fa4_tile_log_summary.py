"""The persistent FA4 kernels' tile logs summarised: does CTA drift explain which kernels hide their last sends?

    python benchmarks/fa4_tile_log_summary.py data/attention-fa4/pers7-tilelog \
        [--json data/attention-fa4/pers7-tilelog/tile-log-summary.json] [--gbps 52.5]
    python benchmarks/fa4_tile_log_summary.py data/attention-fa4/h100-tilelog --record-runs h100-pers12

Reads ``attention-tile.parquet`` and ``tile-log-run.json`` of a ``benchmarks/gpu/fa4_tile_log.py`` run. Per kernel, M,
mode ("fa" / "fused"), the median over its logged launches of ``fa4_tile_log.launch_summary``: the spread of the CTA
end times per wave (range, IQR) and its growth per wave (us, and over the median mainloop: the predictor's
``program_spread``), the last (and second-to-last) wave's end-time range against the drain of its remote bytes at
``--gbps`` (the project's PCIe write rate), and a FIFO replay of the logged remote sends. Beside them: the log's time
cost and the residual of this run (fused - FA-only medians, log off), and the kernels' own paired residuals of the
sweep records (``--records``: paired(fused_vmm_pers_<k>) - paired(pfa4_<k>), median over the folders that hold it).
"""

import argparse
import json
from pathlib import Path

import numpy as np

from xstage.errors import InputError, exit_with
from xstage.hw.attention import fa4_tile_log as T
from xstage.provenance import provenance
from xstage.records import atomic_write_text

RECORDS = ("pers4", "pers5", "pers5b", "pers6", "pers6b")
SENSITIVITY = "predictions/fa4-persistent-drift-h200-pcie-host.json"  # drift_sensitivity (benchmarks/predict_pers_fa4.py)
CONGESTION_US = 10.0  # fused minus FA-only mainloop stretch per wave at or above which a kernel's sends cost compute
TARGET = {"rel": 0.20, "abs_us": 20.0}  # the predictor's tolerance, for "the replay leaves the measured residual"
KEEP = ("compute_span_us", "finish_spread_us", "mainloop_excess.per_wave_us", "mainloop_excess.sum_us",
        "drift.range_slope_us", "drift.iqr_slope_us", "drift.mainloop_us", "drift.range_per_wave",
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


def record_residuals(root: Path, runs=RECORDS) -> dict:
    """{(kernel, M): own paired residual (us)} over the sweep folders ``runs`` under ``root`` (median over folders)."""
    from xstage.records import load_records

    got = {}
    for name in runs:
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


def needed_drift(sens: dict, kernel: str):
    """The spreads s of the drift sweep at which every row of ``kernel`` is within target (None: not in the sweep)."""
    if kernel not in sens:
        return None
    return [float(s) for s, v in sens[kernel].items() if v["within"] == v["n"]]


def verdict(fa: dict, fused: dict, sens: dict) -> dict:
    """Which explanation one kernel and M support, by fixed rules: "congestion" if its fused mainloops stretch,
    wave against wave 0 within a launch, by ``CONGESTION_US`` per wave more than its FA-only ones; else "order" if
    its last wave sends no remote bytes; else "drift" if that wave's CTA end times spread at least as wide as the
    drain of its remote bytes and the FIFO replay of the logged sends leaves the measured residual within
    ``TARGET``; else "beyond replay" (the finish-spread growth, fused minus FA-only, printed beside)."""
    stretch = fused["mainloop_excess.per_wave_us"] - fa["mainloop_excess.per_wave_us"]
    res, replay = fused.get("records_residual_us"), max(0.0, fused["queue.link_done_after_end_us"])
    spread_covers = fused["last_wave.end_range_us"] >= fused["last_wave.drain_us"]
    replay_ok = res is not None and abs(replay - res) <= max(TARGET["abs_us"], TARGET["rel"] * abs(res))
    if stretch >= CONGESTION_US:
        why = "congestion"
    elif fused["last_wave.remote_sends"] == 0:
        why = "order"
    elif spread_covers and replay_ok:
        why = "drift"
    else:
        why = "beyond replay"
    return {"kernel": fused["kernel"], "M": fused["M"], "explanation": why, "records_residual_us": res,
            "replay_after_end_us": replay, "stretch_per_wave_us": stretch,
            "stretch_sum_us": fused["mainloop_excess.sum_us"] - fa["mainloop_excess.sum_us"],
            "finish_spread_growth_us": fused["finish_spread_us"] - fa["finish_spread_us"],
            "drift_per_wave_fa": fa["drift.range_per_wave"], "drift_per_wave_fused": fused["drift.range_per_wave"],
            "drift_needed_all_within": needed_drift(sens, fused["kernel"]),
            "last_wave_end_range_us": fused["last_wave.end_range_us"], "last_wave_end_iqr_us": fused["last_wave.end_iqr_us"],
            "last_wave_drain_us": fused["last_wave.drain_us"], "last_wave_remote_sends": fused["last_wave.remote_sends"],
            "spread_covers_drain": spread_covers}


def summarise(frame, run: dict, gbps: float, residuals: dict) -> list:
    cfg = run["config"]
    by_row = {(r["kernel"], r["M"]): r for r in run["rows"] if "kernel" in r}
    out = []
    for (kern, M, mode), g in frame.groupby(["kernel", "M", "mode"], sort=True):
        blocks = int(M) // 128
        sums = [T.launch_summary(T.stamp_columns(f), blocks, cfg["world_size"], cfg["rank"], gbps)
                for _, f in g.groupby("launch")]
        r = by_row.get((kern, int(M)), {})
        row = {"kernel": kern, "M": int(M), "mode": mode, "launches": len(sums), **median_of(sums),
               "launch_us_log": float(g.groupby("launch")["launch(us)"].first().median()),
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
    p.add_argument("--record-runs", default=",".join(RECORDS),
                   help="comma-separated sweep folders under --records whose paired residuals the verdicts use "
                        "(default: the H200 sweeps pers4-pers6b; another GPU's log wants its own sweep)")
    p.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    folder = Path(args.folder)
    for name in ("attention-tile.parquet", "tile-log-run.json"):
        if not (folder / name).exists():
            raise InputError("folder", str(folder), f"has no {name}")
    if not args.gbps > 0:
        raise InputError("--gbps", args.gbps, "must be > 0")
    out = Path(args.json) if args.json else folder / "tile-log-summary.json"
    if out.exists() and not args.overwrite:
        raise InputError("--json", str(out), "already exists (pass --overwrite to replace it)")
    from xstage.records import load_records

    frame, _ = load_records(folder / "attention-tile.parquet", "tile")
    run = json.loads((folder / "tile-log-run.json").read_text())
    root = Path(args.records) if args.records else folder.parent
    runs = tuple(x.strip() for x in args.record_runs.split(",") if x.strip())
    missing = [n for n in runs if not (root / n / "attention-fa4-kernel.parquet").exists()]
    if missing and args.record_runs != ",".join(RECORDS):
        raise InputError("--record-runs", args.record_runs, f"has no attention-fa4-kernel.parquet under {root}: {missing}")
    residuals = record_residuals(root, runs)
    rows = summarise(frame, run, args.gbps, residuals)
    sens_path = root.parent / SENSITIVITY
    sens = json.loads(sens_path.read_text()).get("drift_sensitivity", {}) if sens_path.exists() else {}
    by = {(r["kernel"], r["M"], r["mode"]): r for r in rows}
    verdicts = [verdict(by[k, M, "fa"], r, sens) for (k, M, mode), r in by.items()
                if mode == "fused" and (k, M, "fa") in by and r["mainloop_excess.per_wave_us"] is not None
                and by[k, M, "fa"]["mainloop_excess.per_wave_us"] is not None]
    for v in verdicts:
        print(f"{v['kernel']:>14} {v['M']:>6}  {v['explanation']:<13} residual {v['records_residual_us']}  replay "
              f"{v['replay_after_end_us']:.1f}  stretch/wave {v['stretch_per_wave_us']:.1f}  drift/wave fa "
              f"{v['drift_per_wave_fa']}  last wave: end range {v['last_wave_end_range_us']:.1f} us, drain "
              f"{v['last_wave_drain_us']:.1f} us")
    doc = {"what": "per-CTA tile-log figures of the persistent FA4 kernels (median over logged launches)",
           "source": str(folder), "gbps": args.gbps, "record_runs": list(runs), "verdict_rule": verdict.__doc__.split("\n\n")[0],
           "congestion_us": CONGESTION_US, "target": TARGET, "verdicts": verdicts, "rows": rows,
           "run_provenance": run.get("provenance"),
           "provenance": provenance()}
    atomic_write_text(out, json.dumps(doc, indent=1), overwrite=args.overwrite)
    return 0


if __name__ == "__main__":
    exit_with(main, "fa4_tile_log_summary")
