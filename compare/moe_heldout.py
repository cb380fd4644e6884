"""The MoE summary over the held-out sweep alone: configurations no law or tuning was fitted on.

``hw/moe/bench.py --sweep heldout`` measures configurations the main sweep never measured (setting L in bf16,
setting M in W8A8); its records carry ``sweep = "heldout"`` (``moe_records.load_kernel_records`` reads it
from each run's recorded arguments). ``heldout_summary`` reports, for those rows only, the keys that judge a
prediction or a target on unseen cases, each prefixed ``heldout_``: the replays' schedule naming and
speedup error (the one-stage replay and the adopted two-stage law, whose record predates the run), and the
GEMM and baseline ratios. Nothing is refitted here.
"""

import pandas as pd

HELDOUT = "heldout"
KEYS = ("n_configs", "geomean_speedup_interleaved", "min_speedup_interleaved", "max_speedup_interleaved",
        "n_identical_schedules", "n_distinct_with_sim", "n_sim_names_winner", "sign_agreement_with_sim",
        "median_speedup_error_pp", "p90_speedup_error_pp",
        "n_distinct_two_stage", "sim_two_stage_names_winner", "sign_agreement_two_stage",
        "median_speedup_error_pp_two_stage", "p90_speedup_error_pp_two_stage",
        "gemm_tflops_vs_library", "gemm_tflops_vs_library_min", "library_n_configs", "library_under_0p9",
        "gemm_tflops_vs_scaled_grouped_mm", "gemm_tflops_vs_scaled_grouped_mm_min", "fused_vs_baseline_min")


def heldout_summary(kernel: pd.DataFrame, summarize_rows) -> dict:
    """``heldout_<key>`` for ``KEYS`` over the rows of held-out runs (``summarize_rows(rows)`` gives the
    summary of a subset); {} when the records hold no held-out run."""
    if "sweep" not in kernel or not (kernel["sweep"] == HELDOUT).any():
        return {}
    part = summarize_rows(kernel[kernel["sweep"] == HELDOUT])
    return {f"heldout_{k}": part[k] for k in KEYS if k in part}
