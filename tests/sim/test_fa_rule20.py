"""Rule 20: the device script's page-placement summary on exact frame lists (``benchmarks/gpu/fa_rule20.py``; no GPU),
the scorer's figures and pre-registered verdicts on small synthetic records (``benchmarks/fa_rule20.py``), and the
committed run ``71a2b52-rule20`` scored again."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.paths import data_dir

from .bench_scripts import BENCHMARKS, load_script


@pytest.fixture(scope="module")
def G():
    return load_script("fa_rule20", "gpu", "fa_rule20_gpu")


def test_pfn_runs_counts_physically_consecutive_frames(G):
    # runs 10-12, 40-41 and 7
    assert G.pfn_runs([10, 11, 12, 40, 41, 7]) == {"pages": 6, "readable": 6, "runs": 3, "longest_run": 3,
                                                   "share_in_2M_runs": 0.0}
    # one 2 MiB run (512 pages) and one stray page
    r = G.pfn_runs(list(range(1000, 1512)) + [5])
    assert (r["runs"], r["longest_run"], r["share_in_2M_runs"]) == (2, 512, 512 / 513)


def test_pfn_runs_unreadable_frames(G):
    # frame numbers read as zero (not root): nothing to say about placement
    assert G.pfn_runs([0, 0, 0])["runs"] is None
    # a zero frame inside breaks the run on both sides
    assert G.pfn_runs([3, 0, 5])["runs"] == 3


def test_page_runs_reads_this_process(G, tmp_path):
    a = np.ones(3 * G.PAGE, dtype=np.uint8)
    r = G.page_runs(a.ctypes.data, a.nbytes)
    assert r["pages"] in (3, 4)                 # the array may straddle one more page
    fake = tmp_path / "pagemap"                 # a pagemap of four present pages at frames 8, 9, 10, 20
    entries = np.array([8, 9, 10, 20], dtype=np.uint64) | np.uint64(1 << 63)
    fake.write_bytes(entries.tobytes())
    assert G.page_runs(0, 4 * G.PAGE, pagemap=str(fake))["runs"] == 2
    assert G.page_runs(0, 4 * G.PAGE, pagemap=str(tmp_path / "missing"))["readable"] == 0


# ---------------------------------------------------------------- the scorer, benchmarks/fa_rule20.py

RUN = "attention-runs/71a2b52-rule20"


@pytest.fixture(scope="module")
def S():
    return load_script("fa_rule20")


def _pairs(blocks: dict) -> pd.DataFrame:
    """Pair rows of one point: {(arm, round): [(base_first, fa, fused), ...]}."""
    rows = []
    for (arm, rnd), pairs in blocks.items():
        for i, (bf, fa, fu) in enumerate(pairs):
            rows.append({"M": 1024, "heads": 2, "head_dim": 64, "block_n": 64, "arm": arm, "round": rnd, "pair": i,
                         "base_first": bf, "fa(us)": fa, "other(us)": fu, "diff(us)": fu - fa})
    return pd.DataFrame(rows)


def test_block_table_medians_per_order_and_gap(S):
    p = _pairs({("keep", 0): [(True, 100.0, 110.0), (False, 100.0, 130.0), (True, 100.0, 112.0),
                              (False, 100.0, 128.0)]})
    b = pd.DataFrame([{"M": 1024, "heads": 2, "head_dim": 64, "block_n": 64, "arm": "keep", "round": 0, "slot": 0,
                       "host_start(s)": 0.0, "host_end(s)": 1.0, "probe_median(us)": 5.0, "share_in_2M_runs": 0.5,
                       "page_runs": 3}])
    row = S.block_table(p, b).iloc[0]
    assert row["E_blk"] == 20.0                          # median of 10, 30, 12, 28
    assert row["E_bal"] == 20.0 and row["gap"] == -18.0  # base first 11, fused first 29
    assert row["point"] == "1024:2 d64 bn64" and row["n"] == 4
    assert row["SE_blk"] == pytest.approx(1.2533 * 1.4826 * 9.0 / 2)   # MAD of |10-20|, |30-20|, |12-20|, |28-20| = 9


def test_f_ratio_and_the_splits(S):
    assert S.f_ratio([1.0, 3.0], [1.0, 1.0]) == 2.0
    assert S.f_ratio([5.0, 5.0, 5.0], [2.0, 2.0, 2.0]) == 0.0
    g = pd.DataFrame({"round": range(8), "E": [100.0, 100.0, 100.0, 100.0, 150.0, 150.0, 150.0, 150.0]})
    a = S.split_agreement(g, "E")
    assert (a["even_us"], a["odd_us"], a["even_odd"]) == (125.0, 125.0, True)
    assert (a["early_us"], a["late_us"], a["early_late"], a["both"]) == (100.0, 150.0, False, False)


def test_blocks_needed(S):
    # 2 x (1.645 x 1.2533 x 35 / 20)^2 = 26.04 -> 27; a wide band (20 % of 500 = 100 us) needs one
    assert S.blocks_needed(35.0, 0.0) == 27
    assert S.blocks_needed(10.0, 500.0) == 1


def _arm_point(F: dict, F_bal=None, F_gap=None) -> list:
    agree = {"both": True}
    return [{"point": pt, "arm": arm, "F": f, "F_bal": (F_bal or {}).get((pt, arm), f),
             "F_gap": (F_gap or {}).get((pt, arm), 1.0), "agree": agree, "agree_bal": agree}
            for (pt, arm), f in F.items()]


def test_verdicts_follow_the_preregistered_rules(S):
    cor = {"probe": 0.0, "sm(MHz)": 0.1, "power(W)": 0.0, "temp(C)": 0.0, "pages_fresh": {},
           "round": {"p": 0.5}}
    # graph instance: recapture spreads, keep does not, at two of three points
    F = {(pt, arm): 1.0 for pt in "abc" for arm in S.ARMS}
    F[("a", "recapture")] = F[("b", "recapture")] = 4.0
    v = S.verdicts(_arm_point(F), cor)
    assert (v["H1_graph_instance"], v["H2_pages"], v["H3_host_link_in_time"], v["H4_clocks"]) == (True, False, False,
                                                                                                 False)
    assert v["keep_meets_criterion"] and v["block_effect_in_keep_at"] == []
    # the block effect in keep at every point, following the probe: H3; a clock correlation: H4
    F = {(pt, arm): 3.0 for pt in "abc" for arm in S.ARMS}
    v = S.verdicts(_arm_point(F), dict(cor, probe=0.7, **{"sm(MHz)": -0.6}))
    assert (v["H1_graph_instance"], v["H2_pages"], v["H3_host_link_in_time"], v["H4_clocks"]) == (False, False, True,
                                                                                                 True)
    # order: F_bal below F and the gap spreading at two points of keep
    v = S.verdicts(_arm_point(F, F_bal={("a", "keep"): 1.0, ("b", "keep"): 1.5},
                              F_gap={("a", "keep"): 3.0, ("b", "keep"): 5.0}), cor)
    assert v["H5_order"]


def test_round_share_sees_a_common_round_effect(S):
    rows = [{"point": pt, "arm": arm, "round": r, "resid": float(r % 2) * 3 + 0.01 * i}
            for i, (pt, arm) in enumerate((pt, arm) for pt in "ab" for arm in S.ARMS) for r in range(8)]
    out = S.round_share(pd.DataFrame(rows), shuffles=200)
    assert out["share"] > 0.99 and out["p"] < 0.05
    flat = pd.DataFrame([dict(x, resid=float((x["round"] + i) % 3)) for i, x in enumerate(rows)])
    assert S.round_share(flat, shuffles=200)["p"] > 0.05


def test_the_committed_run_scores_as_recorded(S):
    rec = S.judge(data_dir() / RUN)
    committed = json.loads((data_dir() / "attention-extra/fa-rule20-scored-h200-pcie-host.json").read_text())
    assert rec["checks"] == {"rows": 36, "ok": 36} and rec["rounds"] == 8
    assert rec["verdicts"] == committed["verdicts"]
    v = rec["verdicts"]
    assert not v["keep_meets_criterion"] and v["instrument_agrees_both_splits"]["keep"]["E_blk"] == 1
    assert sorted(v["arms_with_block_effect_at_2_points"]) == ["fresh", "keep", "recapture"]
    keep = {x["point"]: x for x in rec["arm_point"] if x["arm"] == "keep"}
    assert keep["57344:4 d128 bn128"]["F"] == pytest.approx(3.88, abs=0.01)
    assert [round(x["E_us"]) for x in rec["posthoc"]["pooled_arms"]] == [4, 164, 68]


def test_rule19_blocks_shift_with_host_stores_only(S):
    # rule 19's committed records: the same build into device memory keeps its blocks together, the fused one not
    out = S.rule19_block_shift(data_dir())
    assert out["split_hbm"]["beyond_2"] == 0 and out["split_hbm"]["mean_z2"] == pytest.approx(0.79, abs=0.01)
    assert out["fused_wb_split"]["beyond_2"] == 5 and out["fused_wb_split"]["mean_z2"] == pytest.approx(13.72, abs=0.01)
    assert out["fused_wb_split"]["points"]["57344:4 d128 bn128"]["z"] == pytest.approx(12.0, abs=0.05)


def test_drift_corrected_cancels_a_linear_clock_drift(S):
    # launches drift by 10 us per place; the fused kernel is 5 us slower: raw differences alternate 15 / -5,
    # the drift-corrected ones are all 5
    rows = []
    for i in range(8):
        bf = i % 2 == 0
        p_fa, p_fu = (2 * i, 2 * i + 1) if bf else (2 * i + 1, 2 * i)
        rows.append((bf, 100.0 + 10 * p_fa, 105.0 + 10 * p_fu))
    g = _pairs({("keep", 0): rows})
    assert sorted(set(g["diff(us)"])) == [-5.0, 15.0]
    assert S.drift_corrected(g) == (pytest.approx(5.0), pytest.approx(0.0))


def test_transients_read_the_fa_only_launches(S):
    rows = [(i % 2 == 0, fa, 1000.0) for i, fa in enumerate([900.0, 910.0, 920.0, 1000.0, 1000.0, 1500.0, 1000.0,
                                                             1000.0])]
    (x,) = S.transients(_pairs({("keep", 0): rows}))
    assert (x["first3_us"], x["max_us"], x["max_pair"]) == (-90.0, 500.0, 5.0)


def test_an_existing_record_is_never_overwritten_and_a_bad_run_is_named(S, tmp_path):
    out = tmp_path / "scored.json"
    out.write_text("measured\n")
    with pytest.raises(InputError, match="out"):
        S.main(["--out", str(out)])
    assert out.read_text() == "measured\n"
    with pytest.raises(InputError, match="run"):
        S.main(["--run", "no-such-run"])
    bad = subprocess.run([sys.executable, str(BENCHMARKS / "fa_rule20.py"), "--run", "no-such-run"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "run" in bad.stderr
