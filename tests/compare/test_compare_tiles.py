"""Tile summaries and the Table 2 stall test on a hand-built trace."""

import pandas as pd
import pytest

from xstage.compare.tiles import compare_tile_summaries, span_quantiles, span_summary, stall_pairs, stall_table
from xstage.errors import InputError
from xstage.records import COLUMNS


def _trace(schedule, spans, mainloops, stalls, source="hw"):
    """One SM running alternating L2 (remote) and L1 tiles back to back."""
    rows, t = [], 0.0
    for i, (span, ml, stall) in enumerate(zip(spans, mainloops, stalls)):
        kind = "L2" if span > 0 else "L1"
        rows.append({"source": source, "platform": "p", "experiment": "moe", "config": "M/w8a8/skewed/S",
                     "schedule": schedule, "sm": 0, "seq": i, "kind": kind, "expert": 0, "m": i, "n": 0,
                     "bytes_remote": 4096.0 if span > 0 else 0.0, "mainloop_start(us)": t + stall,
                     "mainloop_end(us)": t + stall + ml, "issue_start(us)": t + stall + ml,
                     "issue_end(us)": t + stall + ml + max(span, 0.1), "mma_stall(us)": stall})
        t += stall + ml
    return pd.DataFrame(rows)[COLUMNS["tile"]]


def test_stall_prediction_pairs_the_successor_mainloop_and_the_stall_two_tiles_later():
    wave = _trace("expert_wave", spans=[9.0, 0, 8.0, 0, 0, 0], mainloops=[5.0, 4.0, 5.0, 6.0, 5.0, 5.0],
                  stalls=[0, 0, 0, 4.5, 1.0, 0])
    pairs = stall_pairs(wave)
    assert pairs["seq"].tolist() == [0, 2]
    assert pairs["predicted_stall(us)"].tolist() == [5.0, 2.0]   # [9 - 4]_+, [8 - 6]_+
    assert pairs["measured_stall(us)"].tolist() == [0.0, 1.0]    # stalls at seq 2 and 4
    inter = _trace("interleaved", spans=[2.0, 0, 2.0, 0], mainloops=[5.0] * 4, stalls=[0] * 4)
    table = stall_table(pd.concat([wave, inter]))
    row = table.iloc[0]
    assert row["span_wave(us)"] == 8.5 and row["span_int(us)"] == 2.0
    assert row["stall_pred_wave(us)"] == 3.5 and row["stall_meas_wave(us)"] == 0.5
    assert row["stall_pred_int(us)"] == 0.0


def test_span_summaries_and_their_comparison():
    meas = _trace("expert_wave", spans=[9.0, 0, 7.0, 0], mainloops=[5.0] * 4, stalls=[0] * 4)
    sim = _trace("expert_wave", spans=[8.0, 0, 8.0, 0], mainloops=[5.0] * 4, stalls=[0] * 4, source="sim")
    s = span_summary(meas)
    assert s["tiles"].tolist() == [2] and s["span_median(us)"].tolist() == [8.0]
    q = span_quantiles(meas)
    assert q[["tiles", "median(us)", "max(us)"]].iloc[0].tolist() == [2, 8.0, 9.0]
    c = compare_tile_summaries(meas, sim)
    assert c[["measured_span_median(us)", "simulated_span_median(us)"]].iloc[0].tolist() == [8.0, 8.0]
    with pytest.raises(InputError, match="share no"):
        compare_tile_summaries(meas, sim.assign(config="other"))
