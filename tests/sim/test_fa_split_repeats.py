"""``benchmarks/fa_split_repeats.py``: the run-to-run spread where committed Triton runs repeat a configuration."""

import pytest

from xstage.paths import data_dir

from .bench_scripts import load_script


@pytest.fixture(scope="module")
def mod():
    return load_script("fa_split_repeats")


def test_the_committed_repeats_at_64k(mod):
    meas = mod.measurements(data_dir())
    vals = sorted(x for _, x in meas[(65536, 3, 128)]["fused_wb_split"])
    assert len(vals) == 3 and vals[0] == pytest.approx(-45, abs=1) and vals[-1] == pytest.approx(18, abs=1)
    band = sorted(x for _, x in meas[(57344, 3, 128)]["fused_wb_split"])     # 7531682 + heldout4 x 3
    assert len(band) == 4 and band[-1] - band[0] > 100


def test_spread_rows_only_where_repeated_and_tolerance_at_the_median(mod):
    rows = mod.spreads({(1024, 3, 128): {"fused_wb": [("a", 100.0), ("b", 160.0), ("c", 130.0)],
                                         "fused_hbm": [("a", 5.0)]}})
    assert [r["variant"] for r in rows] == ["fused_wb"]
    r = rows[0]
    assert (r["median"], r["range"], r["tolerance_at_median_us"]) == (130.0, 60.0, 26.0)
    assert r["range_over_tolerance"] == pytest.approx(60 / 26) and r["runs"] == ["a", "b", "c"]
