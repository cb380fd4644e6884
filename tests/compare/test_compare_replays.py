"""Simulated tile records are the sweep's replays, tile by tile."""

import pytest

from xstage.compare.replays import simulate_fa_tiles, simulate_moe_tiles
from xstage.compare.tiles import span_summary
from xstage.records import COLUMNS
from xstage.sim.sweep import run_fa_config, run_moe_config



def test_moe_tiles_reproduce_the_sweep_row(b200):
    name = "DiT-MoE/w8a8/skewed/S"
    tiles, occ = simulate_moe_tiles(name, b200)
    row = run_moe_config(name, b200)
    assert list(tiles.columns[:len(COLUMNS["tile"])]) == COLUMNS["tile"]
    s = span_summary(tiles).set_index("schedule")
    assert s.loc["expert_wave", "makespan(us)"] == pytest.approx(row["wave_us"], rel=1e-12)
    assert s.loc["interleaved", "makespan(us)"] == pytest.approx(row["int_us"], rel=1e-12)
    assert s.loc["expert_wave", "span_median(us)"] == pytest.approx(row["wave_span_median_us"], rel=1e-12)
    assert set(occ["schedule"]) == {"expert_wave", "interleaved"}


def test_fa_tiles_reproduce_the_sweep_row(b200):
    tiles, _ = simulate_fa_tiles("fa4", 8192, b200)
    row = run_fa_config("fa4", 8192, b200)
    end = tiles.groupby("schedule")["issue_end(us)"].max()
    assert end["fa_only"] == pytest.approx(row["fa_us"], rel=1e-12)
    assert end["fused"] == pytest.approx(row["fused_us"], rel=1e-12)
    assert end["coupled"] == pytest.approx(row["coupled_us"], rel=1e-12)
