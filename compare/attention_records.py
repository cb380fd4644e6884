"""Summaries of the FlashAttention–A2A records (built by ``xstage.records.attention``: kernel rows, one
per variant and M; tile rows, one per output tile of the instrumented kernel): the per-M summary of §5.3.

Records of W ranks (``attention_dist``) hold one row per variant, M and rank; the summary reduces
them by the maximum over ranks (the slowest rank sets the step time).

FA4 records (experiment ``attention-fa4``, ``data/attention-fa4/<run>/``: one H200, W = 8 emulated, one
row per variant and M; per-run figures from ``xstage.compare.attention_fa4.summarise``)
become rows of the same summary with ``fa_core`` = "fa4": FA-only is FA4 (``fa_vs_sdpa`` = cuDNN / FA4),
Serial-best the faster of FA4 + CE and cuDNN + CE, the pipelined FA4 + CE the best unfused baseline, the
fused figures those of the fastest fused variant (``fused_hbm`` left out: it sends nothing). Every run is a
row; ``headline`` marks the latest (``FA4_HEADLINE``). The Triton kernel measured in the same lease
(``attention-fa4/triton/``) is put beside each FA4 row (``triton_*``), so the fastest fused and unfused
paths per M read off one row. Where a committed prediction record (``PREDICTIONS``) predicted a fused
variant of that run and M, the row has ``e_res_predicted_<tag>_us`` beside it (``with_predictions``).
Runs with another scheduler than FA4's own (the SM90 persistent patch:
wrong results) are not results and are left out.

Pure pandas/numpy: the GPU side hands over plain numbers and arrays.
"""

from pathlib import Path

import pandas as pd

from xstage.compare import attention_fa4
from xstage.compare.attention_rule9 import with_rule9
from xstage.errors import InputError
from xstage.records import load_records
from xstage.records.attention import EXPERIMENT

FOLDERS = ("attention", "attention-dist")  # under the data folder: one GPU (emulated ranks), W GPUs
SUMMARY_KEYS = ("platform", "world_size", "M")  # one summary row per key
# variant → summary column; the sender-side times of §5.3
VARIANT_COLUMNS = {"fa": "fa_us", "serial": "serial_us", "fused": "fused_us", "serial_best": "serial_best_us",
                   "sdpa": "sdpa_us", "a2a": "a2a_us", "ce": "ce_us", "fused_instr": "fused_instr_us"}


def variant_times(group: pd.DataFrame) -> pd.Series:
    """``time(us)`` per variant of one M: the last row per (variant, rank), then the maximum over ranks."""
    keys = ["variant", "rank"] if "rank" in group else ["variant"]
    return group.drop_duplicates(keys, keep="last").groupby("variant", sort=False)["time(us)"].max()


def summary_rows(kernel: pd.DataFrame) -> list:
    """One row per (platform, W, M): times of every variant (the slowest rank's), E_res, hiding ratio H
    (Eq. 21) and speedups."""
    if kernel.empty:
        return []
    rows = []
    keys = [k for k in SUMMARY_KEYS if k in kernel]
    for key, group in kernel.groupby(keys, sort=True):
        times = variant_times(group)
        if all(v.endswith("_tune") for v in times.index):  # tuning rows only
            continue
        first = group.iloc[0]
        M = dict(zip(keys, key))["M"]
        row = {"M": int(M), "heads": int(first["heads"]), "head_dim": int(first["head_dim"]),
               "world_size": int(first["world_size"])}
        if "platform" in group:
            row["platform"] = str(first["platform"])
        row["ranks"] = int(group["rank"].nunique()) if "rank" in group else 1
        for variant, col in VARIANT_COLUMNS.items():
            row[col] = float(times[variant]) if variant in times else float("nan")
        for variant in times.index:  # the other measured variants (e.g. fused_wb, serial_best_cudnn)
            if variant not in VARIANT_COLUMNS and not variant.endswith("_tune"):
                row[f"{variant}_us"] = float(times[variant])
        if "store_cache" in group and "fused" in times:
            row["store_cache"] = group.loc[group["variant"] == "fused", "store_cache"].iloc[-1]
        flops = float(first["flops"])
        fa, serial, fused, best = row["fa_us"], row["serial_us"], row["fused_us"], row["serial_best_us"]
        row["fa_tflops"] = flops / fa / 1e6
        row["sdpa_tflops"] = flops / row["sdpa_us"] / 1e6
        row["fa_vs_sdpa"] = row["sdpa_us"] / fa
        row["e_res_us"] = fused - fa
        row["hiding_ratio"] = 1.0 - (fused - fa) / (serial - fa) if serial != fa else float("nan")
        row["speedup_vs_serial"] = serial / fused
        row["speedup_vs_serial_best"] = best / fused
        row.update(_paired(group))
        rows.append(row)
    return rows


def _paired(group: pd.DataFrame) -> dict:
    """E_res and H from matched pairs (``attention_bench.paired_differences``: each difference from two
    back-to-back launches, median over pairs; column ``paired_minus_fa(us)`` of each variant's row),
    where the run recorded them; over ranks, the largest."""
    col = "paired_minus_fa(us)"
    if col not in group:
        return {}
    d = group.dropna(subset=[col]).groupby("variant")[col].max()
    if "fused" not in d or "serial" not in d:
        return {}
    out = {"e_res_paired_us": float(d["fused"]),
           "hiding_ratio_paired": 1.0 - float(d["fused"]) / float(d["serial"]) if d["serial"] else float("nan")}
    for variant in d.index:
        if variant.startswith("fused_"):  # the other fused options, fused_hbm (no remote stores) among them
            out[f"e_res_paired_{variant[len('fused_'):]}_us"] = float(d[variant])
    return out


TABLE_COLUMNS = ("M", "fa_us", "serial_us", "fused_us", "serial_best_us", "sdpa_us", "fa_tflops", "sdpa_tflops",
                 "fa_vs_sdpa", "e_res_us", "hiding_ratio", "e_res_paired_us", "hiding_ratio_paired",
                 "e_res_paired_hbm_us", "speedup_vs_serial", "speedup_vs_serial_best")


def summary_table(kernel_rows: list, extra: tuple = ()) -> str:
    """The per-M summary of kernel rows (tuning rows left out) as a printable table."""
    measured = [r for r in kernel_rows if not r["variant"].endswith("_tune")]
    table = pd.DataFrame(summary_rows(pd.DataFrame(measured)))
    cols = [c for c in TABLE_COLUMNS + tuple(extra) if c in table]
    return table[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}") if len(table) else "(no rows)"


def load_kernel_records(folder, platform: str | None = None) -> pd.DataFrame:
    """All attention kernel records under ``folder`` (a folder or a list of them; files in name order,
    later files win)."""
    frames = []
    folders = [folder] if isinstance(folder, (str, Path)) else list(folder)
    for path in (p for f in folders for p in sorted(Path(f).glob("*.parquet"))):
        frame, meta = load_records(path)
        if meta.get("kind") == "kernel" and (frame["experiment"] == EXPERIMENT).all():
            frames.append(frame)
    if not frames:
        raise InputError("attention records", [str(f) for f in folders],
                         "hold no attention kernel records (*.parquet)")
    kernel = pd.concat(frames, ignore_index=True)
    if platform is not None:
        kernel = kernel[kernel["platform"] == platform]
        if kernel.empty:
            raise InputError("--platform", platform, f"has no attention records in {[str(f) for f in folders]}")
    return kernel


def summarize(data_dir: Path, platform: str | None = None) -> list:
    """``xstage results attention``: summary rows from ``data_dir/attention`` (one GPU) and
    ``data_dir/attention-dist`` (W GPUs), whichever exist."""
    folders = [Path(data_dir) / name for name in FOLDERS if (Path(data_dir) / name).is_dir()]
    if not folders:
        raise InputError("data", str(Path(data_dir) / EXPERIMENT),
                         f"does not exist (nor {FOLDERS[1]}/: no attention records committed)")
    fa4_dir = Path(data_dir) / FA4_FOLDER
    if not folders and not fa4_dir.is_dir():
        raise InputError("data", str(Path(data_dir) / EXPERIMENT),
                         f"does not exist (nor {FOLDERS[1]}/ or {FA4_FOLDER}/: no attention records committed)")
    triton = []
    if folders:
        try:
            triton = [{**r, "fa_core": "triton"} for r in summary_rows(load_kernel_records(folders, platform))]
        except InputError:
            if not fa4_dir.is_dir():
                raise
    triton = with_rule8(triton, data_dir)
    triton = with_rule9(triton, data_dir)
    fa4 = with_predictions(fa4_rows(fa4_dir, platform), data_dir) if fa4_dir.is_dir() else []
    if not triton and not fa4:
        raise InputError("--platform", platform, f"has no attention records in {data_dir}")
    return triton + fa4


# --- FA4 (issue 16): data/attention-fa4/<run>/attention-fa4-kernel.parquet

FA4_FOLDER = "attention-fa4"
FA4_EXPERIMENT = attention_fa4.EXPERIMENT
FA4_TRITON = "triton"  # the Triton bench of the same lease (experiment "attention")
# rep: the latest run, a repeat of run1's identical configuration in the same lease (later records win,
# as for every other record kind); run1 is kept beside it as a row with headline False
FA4_HEADLINE = "rep"
FA4_RESULT_SCHEDULERS = ("single", "persistent-sepO")  # the latter: hw.attention.fa4.PERSISTENT_SCHEDULER
# PersistentSm90 under its other tile schedulers (hw.attention.fa4.load_persistent's labels): the stock one-tile
# grid ("single-sepO"), the local-last order, the dynamic scheduler ("persistent-sepO-locallast", "-dynamic", ...)
FA4_RESULT_SCHEDULER_PREFIXES = ("persistent-sepO-", "single-sepO")
PERS_KEYS = ("pfa4", "best_pers_")  # summary keys of PersistentSm90's figures (pfa4*_us, _vs_sdpa, ...)


def fa4_results(kernel: pd.DataFrame) -> pd.DataFrame:
    """FA4 kernel rows that are results: FA4's own scheduler (``scheduler`` "single", where recorded) and
    PersistentSm90's (``pfa4``, ``serial_pfa4``, ``fused_*_pers``); not the wrong-results patch ("persistent")."""
    kernel = kernel[kernel["experiment"] == FA4_EXPERIMENT]
    if "scheduler" not in kernel:
        return kernel
    sched = kernel["scheduler"].astype(str)
    return kernel[sched.isin(FA4_RESULT_SCHEDULERS) | sched.str.startswith(FA4_RESULT_SCHEDULER_PREFIXES)]


def fa4_summary_rows(kernel: pd.DataFrame, triton: list = (), **labels) -> list:
    """Summary rows (one per M) of one FA4 run's kernel rows; ``triton``: the same lease's Triton summary
    rows (``summary_rows``), matched by M; ``labels`` (run, records, headline) go into every row."""
    kernel = fa4_results(kernel)
    if kernel.empty:
        return []
    by_m = {int(r["M"]): r for r in triton}
    rows = []
    for s in attention_fa4.summarise(kernel.drop_duplicates(["M", "variant"], keep="last").to_dict("records")):
        first = kernel[kernel["M"] == s["M"]].iloc[0]
        row = {"M": s["M"], "heads": int(first["heads"]), "head_dim": int(first["head_dim"]),
               "world_size": int(first["world_size"]), "platform": str(first["platform"]), "ranks": 1,
               "fa_core": "fa4", **labels}
        times = kernel[kernel["M"] == s["M"]].drop_duplicates("variant", keep="last").set_index("variant")["time(us)"]
        row.update(fa_us=s["fa4_us"], sdpa_us=s["cudnn_us"], fa_vs_sdpa=s.get("fa_vs_sdpa"),
                   fa_tflops=s.get("fa_tflops"), sdpa_tflops=s.get("sdpa_tflops"), ce_us=s["ce_us"],
                   serial_us=s["serial_fa4_us"], serial_best_us=s["serial_best_us"], serial_best_is=s["serial_best_is"],
                   pipelined_best_us=s["pipelined_best_us"], pipelined_best_is=s["pipelined_best_is"],
                   best_unfused_us=s["best_unfused_us"], best_unfused_is=s["best_unfused_is"])
        fa, serial = row["fa_us"], row["serial_us"]
        if "best_fused_is" in s:
            fused = s["best_fused_us"]
            row.update(best_fused_is=s["best_fused_is"], fused_us=fused, e_res_us=fused - fa,
                       hiding_ratio=1.0 - (fused - fa) / (serial - fa) if serial != fa else float("nan"),
                       e_res_paired_us=s.get("best_fused_e_res_paired_us"),
                       hiding_ratio_paired=s.get("best_fused_hiding_ratio_paired"),
                       speedup_vs_serial=serial / fused, speedup_vs_serial_best=row["serial_best_us"] / fused,
                       speedup_vs_best_unfused=row["best_unfused_us"] / fused)
        row["serial_fa4_minus_fa_paired_us"] = s["serial_fa4_minus_fa_paired_us"]
        row.update({k: v for k, v in s.items() if k.startswith(PERS_KEYS)})  # PersistentSm90 (runs that have it)
        for variant, t in times.items():  # every measured variant, as the Triton rows name theirs
            row.setdefault(f"{variant}_us", float(t))
        for name, d in s["fused"].items():
            tag = name[len("fused_"):]
            row[f"e_res_paired_{tag}_us"] = d.get("e_res_paired_us")
            row[f"hiding_ratio_paired_{tag}"] = d.get("hiding_ratio_paired")
            if "e_res_own_paired_us" in d:
                row[f"e_res_own_paired_{tag}_us"] = d["e_res_own_paired_us"]
        row.update(_beside_triton(row, by_m.get(s["M"])))
        row.update({f"target_{k}": v for k, v in attention_fa4.targets(s).items() if k != "M"})
        rows.append(row)
    return rows


def _beside_triton(row: dict, tri: dict | None) -> dict:
    """The same lease's Triton figures beside an FA4 row, and the fastest FA, fused and unfused path of both."""
    fa = {"fa4": row["fa_us"], "cudnn": row["sdpa_us"]}
    fused = {row["best_fused_is"]: row["fused_us"]} if "best_fused_is" in row else {}
    out = {}
    if tri is not None:
        out = {"triton_fa_us": tri["fa_us"], "triton_fused_us": tri["fused_us"],
               "triton_e_res_paired_us": tri.get("e_res_paired_us"),
               "triton_hiding_ratio_paired": tri.get("hiding_ratio_paired"),
               "triton_fa_vs_sdpa": tri["fa_vs_sdpa"]}
        fa["triton"], fused["triton_fused"] = tri["fa_us"], tri["fused_us"]
    have = {k: v for k, v in fa.items() if v == v and v is not None}
    out["fa_fastest_is"] = min(have, key=have.get)
    out["fa_fastest_us"] = have[out["fa_fastest_is"]]
    if fused:
        best = min(fused, key=fused.get)
        out.update(fastest_fused_is=best, fastest_fused_us=fused[best], fastest_unfused_is=row["best_unfused_is"],
                   fastest_unfused_us=row["best_unfused_us"], fastest_fused_vs_unfused=row["best_unfused_us"] / fused[best])
    return out


def fa4_rows(folder: Path, platform: str | None = None) -> list:
    """Summary rows of every FA4 run under ``folder`` (one sub-folder per run; ``FA4_TRITON`` beside them)."""
    folder = Path(folder)
    triton = []
    if (folder / FA4_TRITON).is_dir():
        try:
            triton = summary_rows(load_kernel_records(folder / FA4_TRITON, platform))
        except InputError:
            triton = []
    rows = []
    for run in sorted(p for p in folder.iterdir() if p.is_dir() and p.name != FA4_TRITON):
        frames = [load_records(path)[0] for path in sorted(run.glob("*.parquet"))]
        frames = [f for f in frames if "experiment" in f and (f["experiment"] == FA4_EXPERIMENT).any()]
        if not frames:
            continue
        kernel = pd.concat(frames, ignore_index=True)
        if platform is not None:
            kernel = kernel[kernel["platform"] == platform]
        rows += fa4_summary_rows(kernel, triton, run=run.name, records=f"{folder.name}/{run.name}",
                                 headline=run.name == FA4_HEADLINE)
    return sorted(rows, key=lambda r: (not r["headline"], r["run"], r["M"]))




# --- predictions beside the FA4 rows (issue 16): committed records of data/predictions/, their verdict column.
# Each record's rows name the run (``set`` = "attention-fa4/<run>"), M and the fused variant; a run takes the
# first record here that predicted it (one record per run). The persistent kernels' predictions are of their own
# residual (``e_res_own_paired_<tag>_us``), stock FA4's of the paired one (``e_res_paired_<tag>_us``).
PREDICTIONS = (("predictions/fa-heldout-v2-h200-pcie-host.json", "fitted"),       # run1, rep: the FA4 law
               ("predictions/fa4-persistent-heldout-h200-pcie-host.json", "fa4_law"),  # pers4, pers5, pers5b
               # pers6a, pers6, pers6b: the fourth rule (the FA4 law + the split last wave and send rules)
               ("predictions/fa4-persistent-split-heldout-h200-pcie-host.json", "fa4_law_split"),
               # pers8: the fifth rule (the fourth's structure + the tile log's measured drift), fixed before pers8
               ("predictions/fa4-persistent-drift-measured-pers8-h200-pcie-host.json", "fa4_law_drift_measured"),
               # pers9 (M = 12K, 24K, 48K, never measured before): the sixth rule (a backlogged link stalls every SM),
               # fixed from the pers7 tile log and pre-registered before the run; the fifth rule's answers beside it
               # (``e_res_predicted_by_rule5_<tag>_us``)
               ("predictions/fa-rules56-pers9-h200-pcie-host.json", "rule6_congestion", ("rule5",)),
               # pers10 (M = 20K, 28K, 40K, 56K, 60K, never measured before): the seventh rule (every FA4 kernel under
               # the sixth rule's stall, one fitted drift d7), pre-registered before the run; the fifth and sixth beside it
               ("predictions/fa-rule7-pers10-h200-pcie-host.json", "rule7", ("rule5", "rule6_congestion")),
               # pers11 (session 21, the default 8K-64K sweep on another H200, at the fit's M): the seventh rule out of
               # sample but not pre-registered (held out: no row of pers11 was fitted)
               ("predictions/fa-rule7-pers11-h200-pcie-host.json", "rule7", ("rule5", "rule6_congestion")),
               # h100-pers12 (-a, -b; session 23, two H100s): the seventh rule pre-registered on another GPU model, with
               # the H100's v1 platform and nothing refitted (d7, q_c and s5 the H200's)
               ("predictions/fa-rule7-h100-pers12-h100-pcie-host.json", "rule7", ("rule5", "rule6_congestion")),
               ("predictions/fa-rule7-h100-pers12-a-h100-pcie-host.json", "rule7", ("rule5", "rule6_congestion")),
               ("predictions/fa-rule7-h100-pers12-b-h100-pcie-host.json", "rule7", ("rule5", "rule6_congestion")),
               # pers12 (session 23, another H200, the default sweep): the seventh rule pre-registered (call23's
               # question 3); pers12-b (64K, seed 17, the same H200): scored the same way, not pre-registered
               ("predictions/fa-rule7-pers12-h200-pcie-host.json", "rule7", ("rule5", "rule6_congestion")),
               ("predictions/fa-rule7-pers12-b-h200-pcie-host.json", "rule7", ("rule5", "rule6_congestion")))


def with_predictions(rows: list, data_dir: Path, records=PREDICTIONS) -> list:
    """``rows`` (FA4 summary rows) with ``e_res_predicted_<tag>_us`` (tag: the variant less ``fused_``),
    ``prediction_record``, ``prediction_column`` and ``prediction_held_out`` (False where the record's law was
    fitted on any of that M's rows: its ``half`` is "fit") added where a record predicted that run, M and
    variant on the row's platform; the other rows unchanged. A record that is not there adds nothing. An entry's
    optional third element names more columns of the same record, added as ``e_res_predicted_by_<column>_<tag>_us``."""
    import json
    by_run, also_by_run = {}, {}
    for path, column, *more in records:
        also = tuple(more[0]) if more else ()
        file = Path(data_dir) / path
        if not file.is_file():
            continue
        rec = json.loads(file.read_text())
        for r in rec.get("rows", []):
            run, key = str(r.get("set", "")), f"{column}_E_res_us"
            if not run.startswith(FA4_FOLDER + "/") or key not in r or not str(r.get("variant", "")).startswith("fused_"):
                continue
            source = by_run.setdefault((run, rec.get("platform")), (path, column, {}))
            if source[0] == path:
                source[2][(int(r["M"]), r["variant"])] = (float(r[key]), r.get("half") != "fit")
                extra = also_by_run.setdefault((run, rec.get("platform")), {})
                for col in also:
                    if f"{col}_E_res_us" in r:
                        extra[(int(r["M"]), f"e_res_predicted_by_{col}_{r['variant'][len('fused_'):]}_us")] = \
                            float(r[f"{col}_E_res_us"])
    out = []
    for row in rows:
        found = by_run.get((row.get("records"), row.get("platform")))
        at = [] if found is None else [(v, e) for (M, v), e in found[2].items() if M == row["M"]]
        pred = {f"e_res_predicted_{v[len('fused_'):]}_us": e for v, (e, _) in at}
        if pred:
            extra = also_by_run.get((row.get("records"), row.get("platform")), {})
            pred.update({k: e for (M, k), e in extra.items() if M == row["M"]})
        out.append({**row, **pred, "prediction_record": found[0], "prediction_column": found[1],
                    "prediction_held_out": all(h for _, (_, h) in at)} if pred else row)
    return out


# --- the eighth FA rule beside the one-GPU Triton rows (issue 15 item 5; ``benchmarks/predict_fa_rule8.py``)
RULE8_FIT = "predictions/fa-rule8-fit-h200-pcie-host.json"          # the committed rows (not held out)
RULE8_HELDOUT = "predictions/fa-rule8-heldout-7531682-h200-pcie-host.json"   # M never measured, pre-registered


def with_rule8(rows: list, data_dir: Path, fit=RULE8_FIT, heldout=RULE8_HELDOUT) -> list:
    """The one-GPU Triton rows (``ranks`` 1, the records' platform) with new keys only: at the row's M the eighth
    rule's answer per variant from ``fit`` (``e_res_predicted_rule8_<tag>_us``, tag: the variant less ``fused_``;
    ``rule8_held_out`` False: its drifts come from these runs' tile logs), and the held-out run's figures from
    ``heldout`` (``rule8_heldout_run``, ``_within``, ``_n``, ``_median_abs_error_us``, ``_prereg_within``: the
    pre-registered answers). A record that is not there adds nothing; other rows unchanged."""
    import json
    f, h = Path(data_dir) / fit, Path(data_dir) / heldout
    if not f.is_file():
        return rows
    rec = json.loads(f.read_text())
    pred = {}
    for r in rec.get("rows", []):
        if r.get("set") == FOLDERS[0] and "rule8_E_res_us" in r:
            pred.setdefault(int(r["M"]), {})[f"e_res_predicted_rule8_{r['variant'][len('fused_'):]}_us"] = \
                float(r["rule8_E_res_us"])
    held = {}
    if h.is_file():
        hr = json.loads(h.read_text())
        a = hr.get("summary", {}).get("all", {})
        runs = sorted({str(r.get("set")) for r in hr.get("rows", [])})
        held = {"rule8_heldout_record": heldout, "rule8_heldout_run": ",".join(runs),
                "rule8_heldout_within": a.get("rule8", {}).get("within"), "rule8_heldout_n": a.get("rule8", {}).get("n"),
                "rule8_heldout_median_abs_error_us": a.get("rule8", {}).get("median_abs_error_us"),
                "rule8_heldout_prereg_within": a.get("prereg_rule8", {}).get("within")}
    out = []
    for row in rows:
        at = pred.get(int(row.get("M", -1)))
        if at and row.get("ranks", 1) == 1 and row.get("platform") == rec.get("platform"):
            row = {**row, **at, "rule8_record": fit, "rule8_held_out": False, **held}
        out.append(row)
    return out
