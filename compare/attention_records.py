"""Summaries of the FlashAttention–A2A records (built by ``xstage.records.attention``: kernel rows, one
per variant and M; tile rows, one per output tile of the instrumented kernel): the per-M summary of §5.3.

Records of W ranks (``attention_dist``) hold one row per variant, M and rank; the summary reduces
them by the maximum over ranks (the slowest rank sets the step time).

Pure pandas/numpy: the GPU side hands over plain numbers and arrays.
"""

from pathlib import Path

import pandas as pd

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
    return summary_rows(load_kernel_records(folders, platform))


