"""The MoE page's hardware section (issue 17): winners measured and simulated, GEMM and baseline ratios."""

import pandas as pd


def _frames(hardware=None):
    groups = pd.DataFrame({"model": ["A"], "precision": ["w8a8"], "routing": ["skewed"], "geomean_speedup": [1.1],
                           "max_speedup": [1.2], "min_speedup": [1.0]})
    frames = {"sweep": pd.DataFrame({"config": ["A/w8a8/skewed/S"], "speedup": [1.1]}), "groups": groups,
              "source": "sweep records", "platform": "paper-b200"}
    if hardware is not None:
        frames["hardware"] = hardware
    return frames


def test_hardware_section_counts_winners_over_distinct_orders():
    from xstage.dashboards.page_moe import moe_page

    hw = pd.DataFrame({"config": ["a", "b", "c"], "model": ["M-S"] * 3, "precision": ["bf16", "w8a8", "bf16"],
                       "routing": ["balanced"] * 3, "measured_speedup": [1.05, 0.97, 1.0],
                       "simulated_speedup": [1.1, 1.02, 1.0],
                       "winner_measured": ["interleaved", "expert_wave", "same order"],
                       "winner_simulated": ["interleaved", "interleaved", "same order"],
                       "sim_names_winner": [True, False, True], "gemm_vs_grouped_mm": [0.95, 0.9, 0.93],
                       "fused_vs_baseline": [1.2, 1.3, 1.25], "fused_best_vs_baseline": [1.25, 1.3, 1.25]})
    page = moe_page(_frames(hw))
    text = "\n".join(page.blocks)
    assert "hardware: 3 configurations; the simulator names the winner in 1 of the 2 whose orders differ" in text
    assert page.figures >= 2
    without = "\n".join(moe_page(_frames()).blocks)
    assert "hardware:" not in without
