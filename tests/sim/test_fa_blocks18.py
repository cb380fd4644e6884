"""Session 18's post hoc block-effect study (``benchmarks/fa_blocks18.py``): the pairs' times counted back from the
block's host end, the lag scan that finds a known shift between a synthetic trace and the launches, the trace
samples a block takes, and the refusal of an existing ``--json``."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from .bench_scripts import BENCHMARKS, load_script


@pytest.fixture(scope="module")
def B():
    return load_script("fa_blocks18")


TAG = {"M": 1024, "heads": 2, "head_dim": 64, "block_n": 64, "arm": "keep"}


def _pairs(rows):
    """rows: (round, pair, base_first, fa_us, other_us)."""
    return pd.DataFrame([{**TAG, "round": r, "slot": 0, "variant": "fused_wb_split", "pair": i, "base_first": bf,
                          "fa(us)": fa, "other(us)": o, "diff(us)": o - fa} for r, i, bf, fa, o in rows])


def _blocks(ends):
    return pd.DataFrame([{**TAG, "round": r, "host_start(s)": e - 1.0, "host_end(s)": e} for r, e in ends.items()])


def test_pair_times_count_back_from_the_host_end(B):
    # block 0: pairs of 100+200 us (base first), 300+100 us (other first), 50+50 us (base first), ending at t = 10 s
    p = B.pair_times(_pairs([(0, 0, True, 100, 200), (0, 1, False, 300, 100), (0, 2, True, 50, 50),
                             (1, 0, True, 1000, 1000)]), _blocks({0: 10.0, 1: 20.0}))
    b0 = p[p["round"] == 0].sort_values("pair")
    us = 1e-6
    assert np.allclose(b0["end(s)"], [10 - 500 * us, 10 - 100 * us, 10.0])
    assert np.allclose(b0["start(s)"], [10 - 800 * us, 10 - 500 * us, 10 - 100 * us])
    # base first: FA-only runs first; other first: FA-only runs second, after the other launch
    assert np.allclose(b0["t_fa(s)"], [10 - 750 * us, 10 - 500 * us + 100 * us + 150 * us, 10 - 75 * us])
    assert np.allclose(b0["t_other(s)"], [10 - 800 * us + 100 * us + 100 * us, 10 - 450 * us, 10 - 25 * us])
    b1 = p[p["round"] == 1]
    assert np.allclose(b1["start(s)"], [20 - 2000 * us]) and list(b1["point"]) == ["1024:2 d64 bn64"]


def _synthetic(lag_true: float, seed: int = 1):
    """A trace of steps every 50 ms and one block of FA-only launches whose time is 8000 us x 1980 / the clock at
    (mid time + lag_true)."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, 12.0, 0.05)
    clk = rng.choice([1785.0, 1830.0, 1875.0, 1920.0, 1980.0], size=len(t))
    smi = pd.DataFrame({"t": t, "sm(MHz)": clk, "power(W)": 600.0, "temp(C)": 60.0,
                        "reasons": np.where(clk < 1980, 0x4, 0x0)})
    rows, now = [], 1.0
    for i in range(600):
        c = float(np.interp(now + 0.008 + lag_true, t, clk))
        fa = 8000 * 1980 / c
        rows.append((0, i, True, fa, fa))
        now += 2 * fa / 1e6
    pairs = _pairs(rows)
    return pairs, _blocks({0: now}), smi


def test_lag_scan_finds_a_known_shift(B):
    pairs, blocks, smi = _synthetic(lag_true=0.07)
    p = B.pair_times(pairs, blocks)
    scan = B.lag_scan(p, smi)
    best = float(scan.loc[scan["r"].idxmin(), "lag(s)"])
    assert abs(best - 0.07) <= 0.01
    assert scan["r"].min() < -0.95 and float(scan.loc[scan["lag(s)"] == 0, "r"].iloc[0]) > scan["r"].min() + 0.3


def test_block_trace_takes_the_samples_inside_the_timed_pairs_shifted_by_the_lag(B):
    pairs, blocks, smi = _synthetic(lag_true=0.0)
    p = B.pair_times(pairs, blocks)
    t0, t1 = p["start(s)"].min(), p["end(s)"].max()
    for lag in (0.0, 0.1):
        bt = B.block_trace(p, smi, lag)
        inside = smi[(smi["t"] >= t0 + lag) & (smi["t"] <= t1 + lag)]
        assert bt["samples"].iloc[0] == len(inside)
        assert bt["sm(MHz)"].iloc[0] == pytest.approx(inside["sm(MHz)"].mean())
        assert bt["share_power_cap"].iloc[0] == pytest.approx((inside["sm(MHz)"] < 1980).mean())
        assert bt["share_sw_thermal"].iloc[0] == 0.0
    # fa = other in every pair: E is 0, and so is E in cycles (both launches at their own clock)
    bt = B.block_trace(p, smi, 0.0)
    assert bt["E_blk"].iloc[0] == 0.0 and abs(bt["E_cyc"].iloc[0]) < 60


def test_ols_recovers_a_line(B):
    x = np.array([1800.0, 1850, 1900, 1950])
    fit = B.ols(x, 3.0 - 0.5 * x)
    assert fit["slope"] == pytest.approx(-0.5) and fit["se"] == pytest.approx(0.0, abs=1e-9)
    assert fit["r2"] == pytest.approx(1.0)
    assert np.isnan(B.ols([1, 1, 1], [1, 2, 3])["slope"])


def test_json_refuses_an_existing_file(tmp_path):
    out = tmp_path / "taken.json"
    out.write_text("{}")
    r = subprocess.run([sys.executable, str(BENCHMARKS / "fa_blocks18.py"), "--json", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "exists" in r.stderr and str(out) in r.stderr
    assert out.read_text() == "{}"
