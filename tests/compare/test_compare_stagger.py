"""The fused attention kernel's stagger send in the Q-loop replay (``staggered_mainloops``, compare/attention)."""

import numpy as np
import pandas as pd
import pytest

from xstage.compare.attention import (compare_attention_tiles, kernel_staggers, label_staggers, measured_summary,
                                      simulate_like)
from xstage.errors import InputError
from xstage.sim.platform import load_platform
from xstage.sim.replay import ReplayConfig, replay
from xstage.sim.schedule_fa import fa_qloop, send_due_steps, staggered_mainloops

LABEL = "M={M},H=3,d=128,W=8,bm=128,bn=128,warps=8,stages=3,tma,store=default{opts}"


def test_send_due_steps_match_the_kernel_formula():
    # (p % 16) * n_steps // 32, as _fa_fwd_kernel: programs 16 apart share a slot
    assert send_due_steps(np.arange(18), 64).tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                                          0, 2]
    assert send_due_steps([0, 1, 5, 15, 141], 10).tolist() == [0, 0, 1, 4, 4]  # 50//32, 150//32, (141%16)*10//32
    with pytest.raises(InputError, match="program"):
        send_due_steps([-1], 64)


def test_staggered_mainloops_small_case_by_hand():
    # 10 tiles on 4 programs: p0 {0,4,8}, p1 {1,5,9}, p2 {2,6}, p3 {3,7}; 2 slots, 8 steps:
    # send_due = (p % 2) * 8 // 4 = 2 steps for odd p, delta = 2/8 of a Q-loop = 2 us at q = 8
    s = fa_qloop(1, 10 * 128, 4)
    assert s.tiles[:, 4].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    ml = staggered_mainloops(s, 8.0, 8, slots=2)
    assert ml.tolist() == [8, 8, 8, 10, 8, 6, 8, 8, 10, 6]
    # per-tile Q-loops: delta_j = q_j / 4 is taken from tile j and given to the tile before it
    q = np.array([8, 8, 8, 8, 16, 4, 8, 8, 8, 8], dtype=float)
    assert staggered_mainloops(s, q, 8, slots=2)[3:6].tolist() == [8 + 4, 16 - 4 + 1, 4 - 1]
    # a program of one tile sends it at its end: its Q-loop is unchanged
    one = fa_qloop(1, 3 * 128, 4)
    assert staggered_mainloops(one, 8.0, 8, slots=2).tolist() == [8, 8, 8]
    with pytest.raises(InputError, match="qloop_us"):
        staggered_mainloops(s, -1.0, 8)


def test_staggered_mainloops_invariants_at_full_size():
    q, n_steps = 256.9, 128
    s = fa_qloop(3, 16384, 132)
    sm = s.tiles[:, 4]
    ml = staggered_mainloops(s, q, n_steps)
    delta = send_due_steps(np.arange(132), n_steps) * q / n_steps
    assert ml.min() >= q * 17 / 32 > 0 and ml.max() <= q * 47 / 32
    per_program = np.bincount(sm, weights=ml, minlength=132)
    assert np.allclose(per_program, np.bincount(sm, minlength=132) * q)  # totals and compute ends unchanged
    for p in (0, 1, 15, 16, 119, 131):
        mine = ml[sm == p]
        ends = np.cumsum(mine)
        # every tile but the last is sent delta_p into the next Q-loop; the last at the program's end
        assert np.allclose(ends[:-1], q * np.arange(1, len(mine)) + delta[p])
        assert ends[-1] == pytest.approx(q * len(mine))
        assert mine[0] == pytest.approx(q + delta[p]) and mine[-1] == pytest.approx(q - delta[p])
    # a replay without remote bytes is unchanged; with bytes, no program's first send comes before q + delta_p
    h200 = load_platform("h200-pcie-host")
    rc = ReplayConfig(staging_slots=0, remote_epilogue_us=0.0, local_epilogue_us=0.0, record_occupancy=False)
    flat = replay(s, np.full(len(sm), q), np.zeros(len(sm)), h200, rc).makespan_us
    assert replay(s, ml, np.zeros(len(sm)), h200, rc).makespan_us == pytest.approx(flat)
    r = replay(s, ml, np.full(len(sm), 32768.0), h200, rc)
    first = np.r_[True, sm[1:] != sm[:-1]]
    assert np.allclose(r.arrays["epi_start"][first], q + delta[sm[first]])


def _kernel(M=16384, fa=785.7, fused=795.2, stagger=True, with_column=True):
    base = {"source": "hw", "experiment": "attention", "trials": 20, "platform": "h200-pcie-host", "M": M,
            "heads": 3, "head_dim": 128, "world_size": 8, "rank": 0, "block_m": 128, "block_n": 128,
            "flops": 4.0 * M * M * 128 * 3}
    label = LABEL.format(M=M, opts=",stagger,split-tail" if stagger else "")
    times = {"fa": fa, "serial": 999.4, "fused": fused, "serial_best": 902.3, "sdpa": 585.7}
    rows = [{**base, "config": LABEL.format(M=M, opts=",split-tail"), "variant": "fa_tune", "time(us)": 824.7,
             "block_n": 64, "stagger": None}]  # a tuning row first: not the chosen kernel's sizes or send
    rows += [{**base, "config": label, "variant": v, "time(us)": t, "stagger": stagger} for v, t in times.items()]
    rows.append({**base, "config": LABEL.format(M=M, opts=""), "variant": "fused_wb", "time(us)": 987.5,
                 "stagger": False})
    frame = pd.DataFrame(rows)
    return frame if with_column else frame.drop(columns=["stagger"])


def test_stagger_detection_from_kernel_rows_and_labels():
    assert label_staggers(LABEL.format(M=8192, opts=",stagger,split-tail"))
    assert not label_staggers(LABEL.format(M=8192, opts=",drip,split-tail"))
    assert kernel_staggers(_kernel()) is True and kernel_staggers(_kernel(stagger=False)) is False
    assert kernel_staggers(_kernel(), M=8192) is None  # no fused row at that M
    assert kernel_staggers(_kernel(with_column=False)) is True  # older rows: the config label
    old = _kernel(with_column=False).assign(config="M16384")  # records from before the option: tile end
    assert kernel_staggers(old) is False
    assert kernel_staggers(None) is None


def test_measured_summary_takes_the_fused_kernels_sizes_and_send():
    s = measured_summary(_kernel()).iloc[0]
    assert s["block_n"] == 128 and bool(s["stagger"]) is True  # not the fa_tune row's block_n=64
    assert bool(measured_summary(_kernel(with_column=False).assign(config="M16384")).iloc[0]["stagger"]) is False


def test_simulate_like_spreads_the_staggered_sends():
    h200 = load_platform("h200-pcie-host")
    row = measured_summary(_kernel()).iloc[0].to_dict()
    stag = simulate_like(row, h200)
    end = simulate_like({**row, "stagger": False}, h200)
    old = simulate_like({k: v for k, v in row.items() if k != "stagger"}, h200)
    assert (stag["send"], end["send"], old["send"]) == ("stagger", "tile end", "tile end")
    assert old == end
    assert stag["simulated_fa_only(us)"] == end["simulated_fa_only(us)"]
    # 132 aligned 32 KiB bursts overflow the X-Stage at every wave; staggered, only the last wave's do
    assert 0 < stag["simulated_e_res(us)"] < end["simulated_e_res(us)"]
    assert stag["simulated_e_cc(us)"] < end["simulated_e_cc(us)"]


def _hw_tiles(M, config, schedule="fused"):
    """Tile rows as the bench writes them, for the 16K shape (only the columns the compare reads)."""
    s = fa_qloop(3, M, 132)
    start = s.tiles[:, 5] * 256.0
    return pd.DataFrame({"source": "hw", "experiment": "attention", "config": config, "schedule": schedule, "M": M,
                         "n": s.tiles[:, 1], "m": s.tiles[:, 2], "program": s.tiles[:, 4],
                         "bytes_remote": np.where(s.tiles[:, 2] * 128 // (M // 8) == 0, 0, 32768),
                         "mainloop_start(us)": start, "mainloop_end(us)": start + 256.0,
                         "issue_start(us)": start + 300.0, "issue_end(us)": start + 300.5, "kind": "FA"})


def test_attention_tiles_replay_the_measured_send():
    h200 = load_platform("h200-pcie-host")
    M = 16384
    stag = compare_attention_tiles(_hw_tiles(M, LABEL.format(M=M, opts=",stagger,split-tail")), h200).iloc[0]
    end = compare_attention_tiles(_hw_tiles(M, LABEL.format(M=M, opts=",split-tail")), h200).iloc[0]
    assert (stag["send"], end["send"]) == ("stagger", "tile end")
    assert stag["measured_span_median(us)"] == end["measured_span_median(us)"] == pytest.approx(0.5)
    # aligned bursts queue behind each other; staggered ones mostly find the X-Stage drained
    assert stag["simulated_span_median(us)"] < end["simulated_span_median(us)"] / 5
    # tile rows without a label: the kernel rows' "fused" send
    unlabelled = _hw_tiles(M, None)
    assert compare_attention_tiles(unlabelled, h200, _kernel()).iloc[0]["send"] == "stagger"
    assert compare_attention_tiles(unlabelled, h200, _kernel(stagger=False)).iloc[0]["send"] == "tile end"
    assert compare_attention_tiles(unlabelled, h200).iloc[0]["send"] == "tile end"
