"""The fifth FA rule on stock FA4 and Triton rows, and a sixth rule (a backlogged link stalls every SM), held out.

Fifth rule (``benchmarks/predict_pers_fa4.py``, fixed in bf1455f): the FA4 law as recorded (SM-side stage, r_sm =
52.8 GB/s, Q_eff = 0.01 MiB, from ``fa-heldout-v2``), every persistent kernel's programs drifting at s5 = 0.0165
(pers7's FA-only tile-log drift). Applied here, nothing refitted, to rows it was not built on: stock FA4 with direct stores
(``run1``, ``rep``, and stock ``fused_vmm`` of the pers runs: one CTA per tile, no drift; the FA4 law was fitted
on run1 at 8K and 32K, so those six rows are not held out for it: ``rule5_fit_row``) and the project's Triton
kernel (``data/attention``, ``data/attention-fa4/triton``: 132 persistent programs, so drift s5; its structure --
own chunk last, split tails, mainloop factor -- as ``benchmarks/predict_fa_heldout.py`` reads it from the Triton
tile logs).

Sixth rule, fixed from the pers7 tile log only (``data/attention-fa4/pers7-tilelog/attention-tile.parquet``; no
residual of any run used), committed before the run that judges it: ``sim.predict_congestion`` (every SM stalls
while the host link's FIFO backlog exceeds q_c; no per-SM wait for its own store). Its two numbers, computed here
from that file (``measure``):

    q_c        the backlog (fluid FIFO at the tile log's 52.5 GB/s, fed by the logged sends) whose time above q_c
               during each fused ``drain`` mainloop (waves >= 1) best matches that mainloop's stretch over the
               FA-only mainloop of the same wave: least median |stretch - time above|, grid 0-1.5 MB by 0.05 MB
    drift      tile-end persistent kernels (``drain``, Triton ``fused_wb``, ``fused_wb_split``): the median over
               M of the fused ``drain`` rows' ``drift.range_per_wave`` (tile-log-summary.json; under congestion
               the programs stay closer together than FA-only); staggered persistent kernels: s5 (their fused
               drift matches FA-only in the same file); stock FA4: 0. FA-only twins: s5.

Structure as the fifth rule (``split_structure``) for the persistent FA4 kernels, as ``predict_fa_heldout`` for
the Triton kernel (fitted spreads replaced by the rule's drift). Target: max(20 us, 20 %) of the measured residual.

    python benchmarks/predict_fa_congestion.py --out data/predictions/fa-rules56-existing-h200-pcie-host.json
    python benchmarks/predict_fa_congestion.py --preregister 12288,24576,49152 --out data/predictions/...json
    python benchmarks/predict_fa_congestion.py --runs attention-fa4/<new run> --out data/predictions/...json
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import predict_fa_heldout as H  # noqa: E402
import predict_pers_fa4 as PP  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.paths import data_dir  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import atomic_write_text, load_records  # noqa: E402
from xstage.sim.platform import load_platform  # noqa: E402
from xstage.sim.predict import FaKernel, predict_fa  # noqa: E402
from xstage.sim.predict_congestion import predict_congested  # noqa: E402

TILES = "attention-fa4/pers7-tilelog/attention-tile.parquet"
SUMMARY = PP.TILE_LOG
LOG_GBPS = 52.5          # the tile-log summary's drain rate (its ``gbps``)
QC_GRID = tuple(round(0.05 * i, 2) for i in range(31))   # MB
STOCK_RUNS = ("attention-fa4/run1", "attention-fa4/rep")
PERS_RUNS = ("attention-fa4/pers4", "attention-fa4/pers5", "attention-fa4/pers5b", "attention-fa4/pers6a",
             "attention-fa4/pers6", "attention-fa4/pers6b", "attention-fa4/pers8")
TRITON_RUNS = ("attention", "attention-fa4/triton")
KEYS = ("rule6_congestion", "rule5")
PREREG_KERNELS = ("drain", "stagger", "staggerll", "staggersplitw")


def _backlog(sends, horizon: float, dt: float = 0.25) -> np.ndarray:
    R = LOG_GBPS * 1e3
    q, j, out = 0.0, 0, np.zeros(int(horizon / dt) + 1)
    for i in range(len(out)):
        t = i * dt
        while j < len(sends) and sends[j][0] <= t:
            q += sends[j][1]
            j += 1
        q = max(0.0, q - R * dt)
        out[i] = q
    return out


def measure(tiles, summary: dict, dt: float = 0.25) -> dict:
    """The sixth rule's q_c and tile-end drift from the pers7 tile log (module docstring)."""
    t = tiles.assign(dur=tiles["mainloop_end(us)"] - tiles["mainloop_start(us)"])
    d = t[t["kernel"] == "drain"]
    pairs = []    # (stretch, [time above each q_c])
    for M in sorted(d["M"].unique()):
        ref = d[(d["M"] == M) & (d["mode"] == "fa")].groupby("seq")["dur"].median()
        fused = d[(d["M"] == M) & (d["mode"] == "fused")]
        for _, g in fused.groupby("launch"):
            s = g[(g["bytes_remote"] > 0) & g["issue_start(us)"].notna()].sort_values("issue_start(us)")
            Q = _backlog(list(zip(s["issue_start(us)"], s["bytes_remote"])), float(g["mainloop_end(us)"].max()) + 200)
            for a, seq, dur in zip(g["mainloop_start(us)"], g["seq"], g["dur"]):
                if seq == 0:
                    continue
                w = Q[int(a / dt):int((a + ref[seq]) / dt)]
                pairs.append((dur - ref[seq], [float((w > qc * 1e6).sum() * dt) for qc in QC_GRID]))
    if not pairs:
        raise InputError("tile log", TILES, "has no fused drain tile after wave 0")
    stretch = np.array([p[0] for p in pairs])
    above = np.array([p[1] for p in pairs])
    err = np.median(np.abs(above - stretch[:, None]), axis=0)
    best = int(np.argmin(err))
    fused_drift = [float(r["drift.range_per_wave"]) for r in summary["rows"]
                   if r["kernel"] == "drain" and r["mode"] == "fused"]
    return {"q_c_MB": QC_GRID[best], "q_c_bytes": QC_GRID[best] * 1e6, "tiles": len(pairs),
            "median_abs_err_us": dict(zip(map(str, QC_GRID), map(float, err))),
            "tile_end_drift": float(np.median(fused_drift)), "s5": PP.measured_drift(summary)}


def kernel_args(r: dict, m: dict) -> tuple[dict, dict]:
    """(fifth rule's FaKernel kwargs without the law, sixth rule's) for one row."""
    if r["kind"] == "stock":
        return dict(r["kw"]), dict(r["kw"])
    base = dict(r["kw"])
    s5 = m["s5"]
    tile_end = base.get("send", "tile_end") == "tile_end"
    r5 = dict(base, program_spread=s5, fa_program_spread=s5)
    r6 = dict(base, program_spread=m["tile_end_drift"] if tile_end else s5, fa_program_spread=s5)
    return r5, r6


def predict(r: dict, platform, law: dict, m: dict) -> None:
    r5, r6 = kernel_args(r, m)
    p5 = predict_fa(FaKernel(**r5, exit_waits_for_drain=True, sm_store_GBps=law["r_sm_GBps"],
                             shared_buffer_MiB=law["Q_eff_MiB"]), platform)
    p6 = predict_congested(FaKernel(**r6), platform, m["q_c_bytes"])
    r["rule5_E_res_us"], r["rule6_congestion_E_res_us"] = float(p5["E_res_us"]), float(p6["E_res_us"])
    r["rule6_stall_us"], r["predicted_fa_us"] = float(p6["stall_us"]), float(p6["fa_us"])
    if "measured_E_res_us" in r:
        for k in KEYS:
            r[f"{k}_within"] = bool(PP.within(r[f"{k}_E_res_us"], r["measured_E_res_us"]))


def stock_rows(folder: Path, name: str) -> list:
    """Stock FA4's direct-store rows of an FA4 run (``predict_fa_heldout``'s FA4 rows: fused_allhost all remote,
    fused_vmm / fused_perchunk the Ulysses layout), paired residual against stock FA4."""
    frame, _ = load_records(folder / "attention-fa4-kernel.parquet", "kernel")
    out = []
    for M, g in frame.groupby("M"):
        g = g.drop_duplicates("variant", keep="last").set_index("variant")
        for v, frac in H.FA4.items():
            if v in g.index and "fa4" in g.index:
                kw = dict(seq_len=int(M), heads=int(g.loc["fa4", "heads"]), head_dim=int(g.loc["fa4", "head_dim"]),
                          world_size=int(g.loc["fa4", "world_size"]), fa_us=float(g.loc["fa4", "time(us)"]),
                          remote_fraction=frac)
                out.append({"set": name, "kind": "stock", "kernel": "fa4", "M": int(M), "variant": v,
                            "measured_E_res_us": float(g.loc[v, "paired_minus_fa(us)"]), "kw": kw,
                            # the FA4 law (the fifth rule's, and stock FA4's whole fifth-rule model) was fitted here
                            "rule5_fit_row": name == "attention-fa4/run1" and int(M) in H.FA4_FIT_M})
    return out


def triton_rows(folder: Path, name: str, factors: dict) -> list:
    out = []
    for r in H.rows(folder, name, {}, factors):
        s = {k: v for k, v in r["structure"].items() if k not in ("program_spread", "fa_program_spread")}
        out.append({"set": name, "kind": "triton", "kernel": "triton", "M": r["M"], "variant": r["variant"],
                    "measured_E_res_us": r["measured_E_res_us"], "kw": dict(r["kw"], **s)})
    return out


def pers_rows(folder: Path, name: str, skipped: list) -> list:
    out = []
    for r in PP.rows(folder, name, skipped):
        out.append({k: v for k, v in r.items() if k not in ("kw", "kw_split")} | {"kw": r["kw_split"]})
    return out


def loglog_us(g, variant: str, M: int) -> float:
    """``variant``'s time at ``M``, interpolated log-log between the two nearest measured M of ``g`` (a series
    indexed by (variant, M))."""
    ms = np.array(sorted(g.loc[variant].index))
    lo, hi = ms[ms < M].max(), ms[ms > M].min()
    x = (np.log(M) - np.log(lo)) / (np.log(hi) - np.log(lo))
    return float(np.exp((1 - x) * np.log(g.loc[(variant, lo)]) + x * np.log(g.loc[(variant, hi)])))


def preregistered(Ms: list, fa_from: Path) -> list:
    """Rows without a measurement: each kernel's FA-only time at ``Ms`` interpolated from ``fa_from`` (log-log
    in M between the two nearest measured M), so the rule's answer is on record before the run."""
    frame, _ = load_records(fa_from / "attention-fa4-kernel.parquet", "kernel")
    g = frame.drop_duplicates(["M", "variant"], keep="last").set_index(["variant", "M"])["time(us)"]
    base = frame.iloc[0]
    out = []
    for M in Ms:
        common = dict(seq_len=int(M), heads=int(base["heads"]), head_dim=int(base["head_dim"]),
                      world_size=int(base["world_size"]), rank=int(base["rank"]))
        for fa, kern, fused in [("fa4", "fa4", v) for v in ("fused_vmm", "fused_allhost", "fused_perchunk")] + \
                [("pfa4" if k == "drain" else f"pfa4_{k}", k, "fused_vmm_pers" + ("" if k == "drain" else f"_{k}"))
                 for k in PREREG_KERNELS]:
            fa_us = loglog_us(g, fa, M)
            if kern == "fa4":
                kw = dict(common, fa_us=fa_us, remote_fraction=1.0 if fused == "fused_allhost" else None)
                out.append({"set": "preregistered", "kind": "stock", "kernel": "fa4", "M": int(M), "variant": fused,
                            "fa_variant": fa, "fa_us_interpolated": fa_us, "kw": kw})
            else:
                out.append({"set": "preregistered", "kind": "persistent", "kernel": kern, "M": int(M),
                            "variant": fused, "fa_variant": fa, "fa_us_interpolated": fa_us,
                            "kw": dict(common, fa_us=fa_us, **PP.split_structure(kern))})
    return out


def summary(table: list) -> dict:
    groups = {}
    for r in table:
        if "measured_E_res_us" not in r:
            continue
        names = [f"{r['kind']}", f"{r['kind']} {r['kernel'] if r['kind'] == 'persistent' else r['variant']}",
                 f"{r['kind']} M {r['M']}", "all"]
        if r["kind"] == "stock" and not r.get("rule5_fit_row"):
            names.append("stock, held out for the fifth rule's law")
        for name in names:
            groups.setdefault(name, []).append(r)
    return rule_counts(groups, KEYS)


def judge_preregistered(table: list, path: Path, keys, variant_of=lambda v: v) -> None:
    """Each measured row's pre-registered answers (the record at ``path``, its rows keyed by M and
    ``variant_of(variant)``) beside its own, for every rule of ``keys``: ``prereg_fa_us_interpolated``,
    ``prereg_<rule>_E_res_us`` and whether that is within target (``prereg_<rule>_within``). The later rule
    scripts (``predict_fa_rule8`` / ``9`` / ``10``) judge their fresh runs with it."""
    if not path.is_file():
        raise InputError("--preregistered", str(path), "is not a file")
    pre = {(r["M"], r["variant"]): r for r in json.loads(path.read_text())["rows"]}
    for r in table:
        p = pre.get((r["M"], variant_of(r["variant"])))
        if p is None or "measured_E_res_us" not in r:
            continue
        r["prereg_fa_us_interpolated"] = p["fa_us_interpolated"]
        for k in keys:
            r[f"prereg_{k}_E_res_us"] = p[f"{k}_E_res_us"]
            r[f"prereg_{k}_within"] = bool(PP.within(p[f"{k}_E_res_us"], r["measured_E_res_us"]))


def rule_parser(doc: str, fit_help: str, runs_help: str, preregistered_help: str | None = None):
    """The later rule scripts' command line (``predict_fa_rule7`` .. ``10``): ``--platform``, one of ``--fit`` /
    ``--preregister`` / ``--runs``, ``--preregistered`` where the script judges a pre-registration, ``--out``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--platform", default="h200-pcie-host")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--fit", action="store_true", help=fit_help)
    mode.add_argument("--preregister", default=None, help="comma-separated M: predict before measuring")
    mode.add_argument("--runs", default=None, help=runs_help)
    if preregistered_help:
        ap.add_argument("--preregistered", default=None, help=preregistered_help)
    ap.add_argument("--tile-log", default=None, metavar="FOLDER",
                    help="measure q_c and the drifts from this tile-log folder (attention-tile.parquet and "
                         "tile-log-summary.json; under data/ or a path) instead of pers7's (another GPU's own)")
    ap.add_argument("--out", default=None, help="write the record (.json); never over an existing file")
    return ap


def rule_inputs(args) -> tuple:
    """(platform, data folder, the sixth rule's stall measured from the pers7 tile log) for a rule script's
    ``args``; an ``--out`` that exists is refused first (records are never overwritten)."""
    if args.out and Path(args.out).exists():
        raise InputError("--out", args.out, "already exists (records are never overwritten)")
    platform, base = load_platform(args.platform), data_dir()
    tiles, summary = base / TILES, base / SUMMARY
    if getattr(args, "tile_log", None):
        folder = Path(args.tile_log) if Path(args.tile_log).is_dir() else base / args.tile_log
        tiles, summary = folder / "attention-tile.parquet", folder / "tile-log-summary.json"
        for f in (tiles, summary):
            if not f.is_file():
                raise InputError("--tile-log", args.tile_log, f"has no {f.name}")
    m = measure(load_records(tiles, "tile")[0], json.loads(summary.read_text()))
    return platform, base, {**m, "tile_log": str(tiles.parent)}


def judged_rows(base: Path, runs: str, rows_of) -> list:
    """The measured rows of ``--runs`` (comma-separated run folders under ``base``), each folder read by
    ``rows_of(folder, name)``; a folder without ``attention-kernel.parquet`` is bad input."""
    table = []
    for n in (x.strip() for x in runs.split(",") if x.strip()):
        if not (base / n / "attention-kernel.parquet").is_file():
            raise InputError("--runs", n, "has no attention-kernel.parquet")
        table += rows_of(base / n, n)
    return table


def print_summary(summ: dict, shown, width: int) -> None:
    """One line per group of ``summ`` (``rule_counts``), its name right-aligned in ``width``: rows within target /
    rows (median |error| us) of every rule ``k`` with ``shown(k)``."""
    for name, d in summ.items():
        print(f"{name:>{width}}: " + "  ".join(f"{k} {v['within']}/{v['n']} ({v['median_abs_error_us']:.0f})"
                                               for k, v in d.items() if shown(k)))


def write_record(path: str, record: dict, **dumps) -> None:
    """``record`` as JSON at ``path`` (``json.dumps`` options ``dumps``; written to a temporary name, renamed)."""
    atomic_write_text(path, json.dumps(record, default=str, **dumps))
    print(f"wrote {path}")


def rule_summary(table: list, keys: tuple, names_of) -> dict:
    """``rule_counts`` over the measured rows of ``table``, each row in every group ``names_of(row)`` names, with the
    pre-registered answers (``prereg_<k>``) of every rule that has them on every measured row."""
    judged = [r for r in table if "measured_E_res_us" in r]
    groups = {}
    for r in judged:
        for name in names_of(r):
            groups.setdefault(name, []).append(r)
    keys = keys + tuple(f"prereg_{k}" for k in keys if judged and all(f"prereg_{k}_within" in r for r in judged))
    return rule_counts(groups, keys)


def rule_counts(groups: dict, keys) -> dict:
    """Per group of judged rows and per rule ``k`` of ``keys``: rows within target (``{k}_within``), rows, and the
    median |predicted - measured| residual (``{k}_E_res_us`` against ``measured_E_res_us``)."""
    return {name: {k: {"within": int(sum(r[f"{k}_within"] for r in g)), "n": len(g),
                       "median_abs_error_us": float(np.median([abs(r[f"{k}_E_res_us"] - r["measured_E_res_us"])
                                                                for r in g]))} for k in keys}
            for name, g in sorted(groups.items())}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--platform", default="h200-pcie-host")
    ap.add_argument("--runs", default=None, help="comma-separated FA4 runs under data/ to judge (default: every "
                                                 "existing stock, Triton and persistent run)")
    ap.add_argument("--preregister", default=None, help="comma-separated M: predict before measuring")
    ap.add_argument("--fa-from", default="attention-fa4/pers8", help="run the FA-only times are interpolated from")
    ap.add_argument("--out", default=None, help="write the record (.json); never over an existing file")
    args = ap.parse_args(argv)
    if args.out and Path(args.out).exists():
        raise InputError("--out", args.out, "already exists (records are never overwritten)")
    platform, base = load_platform(args.platform), data_dir()
    if not (base / TILES).is_file():
        raise InputError("tile log", str(base / TILES), "is missing (the sixth rule is measured from it)")
    m = measure(load_records(base / TILES, "tile")[0], json.loads((base / SUMMARY).read_text()))
    law = json.loads((base / PP.LAWS).read_text())["laws"]["fa4"]
    factors = json.loads((base / PP.LAWS).read_text())["mainloop_factors"]
    skipped = []
    if args.preregister:
        try:
            Ms = [int(x) for x in args.preregister.split(",") if x.strip()]
        except ValueError:
            raise InputError("--preregister", args.preregister, "must be comma-separated integers") from None
        table = preregistered(Ms, base / args.fa_from)
    elif args.runs:
        table = []
        for name in (x.strip() for x in args.runs.split(",") if x.strip()):
            if not (base / name / "attention-fa4-kernel.parquet").is_file():
                raise InputError("--runs", name, "has no attention-fa4-kernel.parquet")
            table += [r for r in stock_rows(base / name, name) if r["variant"] != "fused_vmm"]
            table += pers_rows(base / name, name, skipped)   # its stock fused_vmm row among them
    else:
        table = [r for n in STOCK_RUNS for r in stock_rows(base / n, n)]
        table += [r for n in TRITON_RUNS for r in triton_rows(base / n, n, factors)]
        table += [r for n in PERS_RUNS for r in pers_rows(base / n, n, skipped)]
    for r in table:
        predict(r, platform, law, m)
    print(f"sixth rule from {TILES}: q_c = {m['q_c_MB']} MB ({m['tiles']} drain tiles, median |stretch - time above| "
          f"{m['median_abs_err_us'][str(m['q_c_MB'])]:.1f} us); tile-end drift {m['tile_end_drift']:.4f}, s5 {m['s5']:.4f}")
    for r in table:
        meas = r.get("measured_E_res_us")
        print(f"{r['set']:>22} {r['M']:>6} {r['variant']:>28} meas {'-' if meas is None else f'{meas:.0f}':>5} "
              f"rule5 {r['rule5_E_res_us']:>5.0f} rule6 {r['rule6_congestion_E_res_us']:>5.0f} "
              + ("" if meas is None else " ".join(f"{k[:5]}:{'y' if r[k + '_within'] else 'n'}" for k in KEYS)))
    summ = summary(table)
    for name, d in summ.items():
        print(f"{name:>30}: " + "  ".join(f"{k} {v['within']}/{v['n']} ({v['median_abs_error_us']:.0f})" for k, v in d.items()))
    if args.out:
        record = {"what": "FA residual exposure: the fifth rule (FA4 law + drift) and the sixth (global stall above a "
                          "backlog q_c) on rows neither was fitted on", "platform": args.platform,
                  "tolerance": PP.TOLERANCE, "rules_commit": _commit(), "laws_from": PP.LAWS, "fa4_law": law,
                  "sixth_rule_from": TILES, "sixth_rule": m, "mode": "preregistered" if args.preregister else "judged",
                  "fa_us_interpolated_from": args.fa_from if args.preregister else None, "skipped": skipped,
                  "summary": summ, "rows": table, "provenance": provenance()}
        atomic_write_text(args.out, json.dumps(record, indent=1, default=str))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    exit_with(main, "predict_fa_congestion.py")
