"""``benchmarks/fa_split_tile_spread.py``: the split kernel's programs spread little at d 64 (heldout4's tile log)."""

import pandas as pd
import pytest

from xstage.paths import data_dir
from xstage.records import load_records

from .bench_scripts import load_script


@pytest.fixture(scope="module")
def mod():
    return load_script("fa_split_tile_spread")


def test_heldout4_d64_spreads_less_than_d128(mod):
    t = load_records(data_dir() / "attention-runs/ad8f0af-heldout4/attention-tile.parquet", "tile")[0]
    rows = {(r["M"], r["head_dim"]): r for r in mod.spread_rows(t)}
    assert set(rows) == {(57344, 128), (63488, 128), (65536, 64), (61440, 64), (131072, 64)}
    assert all(rows[k]["slope_per_mainloop"] < 0.01 for k in rows if k[1] == 64)
    assert all(rows[k]["slope_per_mainloop"] > 0.015 for k in rows if k[1] == 128)


def test_a_linear_spread_is_read_back(mod):
    recs = []
    for seq in range(5):
        for p in range(11):
            start = 1000.0 * seq + p * (1 + seq)            # p10-p90 range 8 * (1 + seq): +8 us a wave
            recs.append({"schedule": "fused_wb_split", "split": False, "M": 4096, "seq": seq,
                         "mainloop_start(us)": start, "mainloop_end(us)": start + 800.0})
    (r,) = mod.spread_rows(pd.DataFrame(recs))
    assert r["slope_us_per_wave"] == pytest.approx(8.0) and r["slope_per_mainloop"] == pytest.approx(0.01)
    assert r["waves"] == 5
