"""The index page's table: one row per measured-vs-simulated comparison the pages hold."""

import pandas as pd

from xstage.compare import attention as att
from xstage.compare import moe as moe_cmp
from xstage.compare.bursts import MODE_ORDER, burst_error_summary
from xstage.compare.metrics import error_summary

COLUMNS = ["experiment", "quantity", "median_rel_err", "p90_rel_err", "n", "speedup_sign_agreement"]


def error_table(out: dict) -> pd.DataFrame:
    """One row per measured-vs-simulated comparison: median / p90 relative error, sign agreement."""
    rows = []
    for name, frames in out["calibration"].items():
        if "compare" in frames:
            s = burst_error_summary(frames["compare"])
            modes = [""] + [f"{m}_" for m in MODE_ORDER if f"{m}_issue_n_points" in s]
            for mode in modes:
                for q, label in (("issue", "issue time"), ("period", "period")):
                    if f"{mode}{q}_n_points" not in s or not s[f"{mode}{q}_n_points"]:
                        continue
                    rows.append({"experiment": f"calibration bursts: {name}",
                                 "quantity": label + (f" ({mode[:-1]})" if mode else ""),
                                 "median_rel_err": s[f"{mode}{q}_median_rel_err"],
                                 "p90_rel_err": s[f"{mode}{q}_p90_rel_err"], "n": s[f"{mode}{q}_n_points"],
                                 "speedup_sign_agreement": float("nan")})
    if "compare" in out.get("moe", {}):
        c = out["moe"]["compare"]
        s = moe_cmp.moe_error_summary(c)
        for q in ("wave", "int", "speedup"):
            rows.append({"experiment": "MoE kernels", "quantity": q, "median_rel_err": s[f"{q}_median_rel_err"],
                         "p90_rel_err": s[f"{q}_p90_rel_err"], "n": s[f"{q}_n_points"],
                         "speedup_sign_agreement": s["speedup_sign_agreement"] if q == "speedup" else float("nan")})
    if "compare" in out.get("attention", {}) and len(out["attention"]["compare"]):
        c = out["attention"]["compare"]
        s = att.attention_error_summary(c)
        for q in ("fused", "speedup_vs_serial"):
            rows.append({"experiment": "FlashAttention + A2A", "quantity": q,
                         "median_rel_err": s[f"{q}_median_rel_err"], "p90_rel_err": s[f"{q}_p90_rel_err"],
                         "n": s[f"{q}_n_points"],
                         "speedup_sign_agreement": s["speedup_sign_agreement"] if q.startswith("speedup") else float("nan")})
    if "compare" in out.get("spans", {}):
        c = out["spans"]["compare"]
        s = error_summary(c["measured_span_median(us)"], c["simulated_span_median(us)"])
        rows.append({"experiment": "MoE tiles", "quantity": "span median", "median_rel_err": s["median_rel_err"],
                     "p90_rel_err": s["p90_rel_err"], "n": s["n_points"], "speedup_sign_agreement": float("nan")})
    return pd.DataFrame(rows, columns=COLUMNS)
