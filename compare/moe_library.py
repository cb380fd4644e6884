"""The grouped-GEMM library rate the fused MoE GEMM is judged against: the faster of torch and quack.

The MoE runs time ``torch._grouped_mm`` in the same process as the fused kernel (``grouped_mm`` variant).
quack-kernels' grouped GEMM runs in a process of its own (its CuTe DSL stack is carried separately:
``benchmarks/gpu/quack_grouped.py``), which times both libraries on the same inputs again. So the library
rate of a configuration, on the fused run's own clock, is its ``grouped_mm`` time scaled by the paired
quack / torch time ratio where quack is faster (never scaled up: where torch wins it is the library).

``gemm_vs_library`` = that library time / the fused kernel's faster local (remote stores off) time. Runs of
``hw/moe/bench.py --quack`` time quack in the same process and rotation as the fused kernel
(``quack_grouped_mm`` variant); where a configuration's latest run has it, that time is used directly.
"""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd


def geomean(x) -> float:
    """Geometric mean of the finite, positive values (NaN when there are none)."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    return float(np.exp(np.log(x).mean())) if len(x) else math.nan


def load_library_runs(folder: Path) -> pd.DataFrame:
    """Every ``quack-*/quack.json`` under ``folder``: one row per timed configuration (the newest run wins),
    with ``torch(us)``, ``quack(us)``, ``quack_over_torch`` and the run's date and commit."""
    rows = []
    for f in sorted(Path(folder).glob("**/quack-*/quack.json")):
        d = json.loads(f.read_text())
        prov = d.get("provenance", {})
        for r in d.get("rows", []):
            if r.get("ok") and r.get("torch(us)") and r.get("quack(us)"):
                rows.append({"config": r["config"], "torch(us)": float(r["torch(us)"]),
                             "quack(us)": float(r["quack(us)"]), "quack_tuned": bool(r.get("tuned")),
                             "date": prov.get("date", ""), "git_commit": prov.get("git_commit", "")})
    if not rows:
        return pd.DataFrame(columns=["config", "torch(us)", "quack(us)", "quack_over_torch"])
    frame = pd.DataFrame(rows).sort_values("date").drop_duplicates("config", keep="last")
    frame["quack_over_torch"] = frame["quack(us)"] / frame["torch(us)"]
    return frame.set_index("config")


SAME_RUN = "quack_grouped_mm(us)"   # per_config's column of the fused run's own quack variant (bench --quack)


def library_ratios(per_config: pd.DataFrame, library: pd.DataFrame) -> pd.DataFrame:
    """Per configuration with a quack time: its precision, the faster library's name, ``gemm_vs_library`` and
    ``library_same_run`` (True: quack was timed in the fused run itself, ``quack_grouped_mm``; else the
    separate run's paired quack / torch ratio scales the run's ``grouped_mm`` time)."""
    cols = ["precision", "faster_library", "gemm_vs_library", "library_same_run"]
    if "gemm_vs_grouped_mm" not in per_config:
        return pd.DataFrame(columns=cols)
    by_config = per_config.set_index("config") if "config" in per_config else per_config
    ratio = pd.Series(np.nan, index=by_config.index, dtype=float)
    if not library.empty:
        ratio.update(library["quack_over_torch"].astype(float).reindex(by_config.index))
    same = pd.Series(False, index=by_config.index)
    if SAME_RUN in by_config and "grouped_mm(us)" in by_config:
        own = by_config[SAME_RUN].astype(float) / by_config["grouped_mm(us)"].astype(float)
        same = np.isfinite(own) & (own > 0)
        ratio[same] = own[same]
    both = by_config[np.isfinite(ratio)]
    ratio = ratio[both.index]
    precision = both["precision"] if "precision" in both else "bf16"
    return pd.DataFrame({"precision": precision,
                         "faster_library": np.where(ratio < 1.0, "quack", "torch"),
                         "gemm_vs_library": both["gemm_vs_grouped_mm"].astype(float) * np.minimum(ratio, 1.0),
                         "library_same_run": same[both.index].astype(bool)}, index=both.index)


def library_summary(per_config: pd.DataFrame, folder: Path) -> dict:
    """``xstage results moe`` keys: the GEMM ratio against the faster library (bf16 configurations with a
    quack run), geomean and minimum, and how many configurations each library won."""
    lib = library_ratios(per_config, load_library_runs(folder))
    lib = lib[lib["precision"] == "bf16"]
    x = lib["gemm_vs_library"].astype(float)
    x = x[np.isfinite(x)]
    if not len(x):
        return {}
    return {"gemm_tflops_vs_library": geomean(x),
            "gemm_tflops_vs_library_min": float(x.min()),
            "library_n_configs": int(len(x)),
            "library_quack_faster": int((lib.loc[x.index, "faster_library"] == "quack").sum()),
            "library_same_run": int(lib.loc[x.index, "library_same_run"].sum()),
            "library_under_0p9": int((x < 0.9).sum()),
            "library_worst_config": str(x.idxmin())}
