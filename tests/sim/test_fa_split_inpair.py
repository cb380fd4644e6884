"""The in-pair tile-log measurement of the split kernel (``benchmarks/gpu/fa_split_inpair.py``; its CPU parts), its
pre-registered summary (``benchmarks/fa_split_inpair_summary.py``) and the post hoc key models
(``benchmarks/fa_split_keys.py``), on exact small cases."""

import numpy as np
import pandas as pd
import pytest

from xstage.records.attention import decode_clock_field

from .bench_scripts import load_script


@pytest.fixture(scope="module")
def summ():
    return load_script("fa_split_inpair_summary")


@pytest.fixture(scope="module")
def keys():
    return load_script("fa_split_keys")


def test_decode_clock_field():
    prog, cyc = decode_clock_field(np.array([5 | (1_900_000 << 16), 131 | (0 << 16)], dtype=np.int64))
    assert prog.tolist() == [5, 131] and cyc.tolist() == [1_900_000, 0]


def test_bench_summarize_one_log():
    bench = load_script("gpu/fa_split_inpair")
    # two programs, two waves; program p's Q-loops 1000 ns at 1.9 GHz (1900 cycles), issues 100 ns
    rows = []
    for p in range(2):
        for w in range(2):
            l0 = 10_000 + w * 2000 + p * 64
            rows.append([p | (1900 << 16), p, w, l0, l0 + 1000, l0 + 1000, l0 + 1100, 0])
    s, waves, raw = bench.summarize(np.array(rows, dtype=np.int64), np.array([True, False, True, False]))
    assert s["qloop_cycles_sum"] == 4 * 1900 and s["mhz"] == pytest.approx(1900.0)
    assert s["makespan_us"] == pytest.approx((12_064 + 1100 - 10_000) / 1e3)
    assert s["issue_us_sum"] == pytest.approx(0.4) and s["remote_tiles"] == 2
    assert s["qloop_mcycles_prog_mean"] * 1e6 == pytest.approx(2 * 1900 * 2 / 132)   # 132 programs' mean
    assert [w["wave"] for w in waves] == [0, 1] and waves[0]["mhz_p50"] == pytest.approx(1900.0)
    assert raw.shape == (4, 7) and raw.dtype == np.int32
    rec = bench.as_record(pd.DataFrame([s]))
    from xstage.records.spelling import misspelt
    assert [c for c in rec.columns if misspelt(c)] == [] and rec["qloop_sum(us)"].iloc[0] == pytest.approx(4.0)


def test_classes_and_readings(summ):
    assert summ.classify(20.0, 50.0) == "hidden" and summ.classify(120.0, 1300.0) == "hidden"
    assert summ.classify(100.0, 300.0) == "exposed" and summ.classify(60.0, 300.0) == "between"
    assert summ.reading("hidden", 29.9, -100.0) == "no_stall"
    assert summ.reading("hidden", 60.0, -30.0) == "clock"
    assert summ.reading("hidden", 60.0, -29.9) == "absorbed"
    assert summ.reading("exposed", 60.0, -10.0) == "plain" and summ.reading("exposed", 60.0, -40.0) == "clock"


def _launch(rep, M, heads, pair, variant, block, event, mcyc, qus, mhz, issue=0.0):
    return {"rep": rep, "M": M, "heads": heads, "pair": pair, "variant": variant, "block": block, "event(us)": event,
            "qloop_mcycles_prog_mean": mcyc, "qloop_prog_mean(us)": qus, "mhz": mhz, "issue_sum(us)": issue}


def test_pair_rows_decomposition(summ):
    # FA-only: 1.9e6 cycles at 1900 MHz = 1000 us; split: 1.995e6 cycles (50 us more at 1900) at 1995 MHz = 1000 us
    la = pd.DataFrame([_launch(0, 4096, 2, 0, "fa", "fused_wb_split", 5000.0, 1.9, 1000.0, 1900.0),
                       _launch(0, 4096, 2, 0, "fused_wb_split", "fused_wb_split", 5004.0, 1.995, 1000.0, 1995.0,
                               issue=132.0)])
    r = summ.pair_rows(la).iloc[0]
    assert r["d_event"] == pytest.approx(4.0) and r["a_us"] == pytest.approx(50.0)
    assert r["b_us"] == pytest.approx(-50.0) and r["df"] == pytest.approx(0.05) and r["c_us"] == pytest.approx(1.0)


def test_verdict(summ):
    hid = {"class": "hidden", "reproduced": True}
    exp = {"class": "exposed", "reproduced": True, "reading": "plain"}
    assert summ.verdict([dict(hid, reading="clock"), exp])["verdict"] == "H_clock supported"
    assert summ.verdict([dict(hid, reading="clock"), dict(exp, reading="clock")])["verdict"] == "mixed"
    assert summ.verdict([dict(hid, reading="no_stall"), exp])["verdict"] == "H_stall supported"
    assert summ.verdict([dict(hid, reading="absorbed")])["verdict"] == "H_absorbed supported"
    assert summ.verdict([dict(hid, reading="absorbed", reproduced=False), exp])["verdict"] == \
        "no reproduced hidden configuration"


def test_key_ramp_and_model(keys):
    assert keys.ramp(np.array([1.0, 2.0, 4.0]), 1.0, 4.0, 1).tolist() == pytest.approx([1.0, 0.5, 0.0])
    assert keys.ramp(np.array([0.2, 0.1, 0.05]), 0.2, 0.05, -1).tolist() == pytest.approx([1.0, 0.5, 0.0])
    sf = keys.shape_frame([(49152, 3)], [7000.0])
    assert sf["waves"].iloc[0] == pytest.approx(1152 / 132)
    assert sf["r"].iloc[0] == pytest.approx(132 * 128 * 128 * 2 * 7 / 8 / 52.8e3 / (7000 / (1152 / 132)))
    p = {"h": 0.001, "a": 60.0, "ramps": {"fa_us": (1000.0, 49000.0)}}        # ramp 0.5 at 7000 us
    assert keys.predict(sf, p)[0] == pytest.approx(7.0 + 60.0 * sf["n_rw"].iloc[0] * 0.5)
    assert keys.within([120.0, 10.0], [100.0, 31.0]).tolist() == [True, False]


def test_offset_rows_and_verdict(summ):
    rows = []
    for pair in range(2):
        rows += [_launch(0, 4096, 2, pair, "fa", "fused_wb_split", 10000.0, 1.9, 1000.0, 1900.0),
                 _launch(0, 4096, 2, pair, "fused_wb_split", "fused_wb_split", 10050.0, 1.95, 1020.0, 1900.0),
                 _launch(0, 4096, 2, pair, "fa", "split_hbm", 10000.0, 1.9, 1000.0, 1900.0),
                 _launch(0, 4096, 2, pair, "split_hbm", "split_hbm", 9910.0, 1.89, 995.0, 1900.0)]
    (r,) = summ.offset_rows(pd.DataFrame(rows))
    assert r["d_split"] == pytest.approx(50.0) and r["d_hbm"] == pytest.approx(-90.0)
    assert r["link_us"] == pytest.approx(140.0) and r["beta_c"] == pytest.approx(0.009) and r["pairs"] == 2
    assert summ.offset_verdict([r]) == "supported"
    assert summ.offset_verdict([dict(r, link_us=25.0)]) == "refuted"               # FA-only 10 ms: long kernel
    assert summ.offset_verdict([dict(r, link_us=25.0, fa_event_us=5000.0)]) == "partial"
    assert summ.offset_verdict([dict(r, beta_c=0.002)]) == "partial"


def test_rule13_beta_and_preregistered_answers():
    """beta from the committed in-pair run, and the committed pre-registered answers recomputed from the rule."""
    import json

    from xstage.paths import data_dir

    r13 = load_script("predict_fa_rule13")
    beta = r13.beta_from_inpair(data_dir())
    assert len(beta["per_config"]) == 7 and all(-0.011 < v < -0.007 for v in beta["per_config"].values())
    assert beta["beta"] == pytest.approx(0.0087, abs=5e-5)
    pre = json.loads((data_dir() / "attention-extra/fa-rule13-preregistered-h200-pcie-host.json").read_text())
    assert pre["d13"] == r13.D13 and pre["beta"]["beta"] == pytest.approx(beta["beta"])
    platform, base, m, m8, factors = r13.inputs()
    row = dict(pre["rows"][0])
    r13.answer(row, platform, m, m8, pre["beta"]["beta"])
    assert row["rule13_E_res_us"] == pytest.approx(pre["rows"][0]["rule13_E_res_us"], abs=0.01)
    assert row["rule13_E_res_us"] == pytest.approx(row["stall_d13_us"] - beta["beta"] * row["kw"]["fa_us"])
