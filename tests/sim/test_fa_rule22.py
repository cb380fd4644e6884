"""Rule 22: the last-wave terms follow the kernel's own configuration (tiles, programs, tail split, work order), each
form is rule 21's ``bytes_offset`` when its new coefficient is zero, the scorer reproduces rule 21's committed
figures, and the committed post hoc record (no form qualifies) recomputes (``benchmarks/fa_rule22.py``)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from xstage.paths import data_dir

from .bench_scripts import BENCHMARKS, load_script


@pytest.fixture(scope="module")
def R():
    return load_script("fa_rule22")


@pytest.fixture(scope="module")
def points(R):
    return R.plain_points(data_dir())


def test_the_fused_config_is_the_calls_wb_split_build(R):
    cfg = R.fused_config({"M": 45056, "heads": 4, "head_dim": 128, "block_n": 128})
    assert (cfg.store_cache, cfg.drip, cfg.split_tail, cfg.stagger, cfg.tail_parts) == ("", False, True, False, 2)
    assert (cfg.seq_len, cfg.heads, cfg.head_dim, cfg.block_n, cfg.block_m, cfg.world_size, cfg.tma) == \
        (45056, 4, 128, 128, 128, 8, True)


@pytest.mark.parametrize("p, want", [
    # tiles = M / 128 x heads; 132 programs; the last wave's tiles in halves; own chunk (tiles / 8) last
    ({"M": 45056, "heads": 4, "head_dim": 128, "block_n": 128},
     {"tiles": 1408, "programs": 132, "tail": 88, "parts": 2, "S": 11.0, "H": 1.0, "n_last": 44}),
    ({"M": 24576, "heads": 5, "head_dim": 128, "block_n": 128},     # 2 x 36 tail parts <= 132: span k + 1/2
     {"tiles": 960, "programs": 132, "tail": 36, "parts": 2, "S": 7.5, "H": 0.5, "n_last": 48}),
    ({"M": 49152, "heads": 2, "head_dim": 128, "block_n": 128},     # 108 tail tiles > 96 own: 12 remote in the tail
     {"tiles": 768, "programs": 132, "tail": 108, "parts": 2, "S": 6.0, "H": 0.5, "n_last": 12}),
])
def test_layout_terms_agree_with_the_kernel_config(R, p, want):
    cfg = R.fused_config(p)
    t = R.layout_terms(cfg)
    assert {k: t[k] for k in want} == want
    assert (t["tiles"] - t["tail"], t["parts"]) == cfg.tail_split(t["programs"])
    assert t["tiles"] == cfg.layout.num_tiles == p["M"] // 128 * p["heads"]


def test_layout_terms_of_a_tiny_schedule_by_hand(R):
    # 16 tiles on 6 programs: 12 whole (2 per program), 4 tail tiles in halves on programs 0-5, 0, 1 -> span 3;
    # the own chunk (m-blocks 0, 1) last: positions 12, 13 are remote and end at 2.5 -> H 0.5, 2 tiles in that batch
    cfg = R.fused_config({"M": 2048, "heads": 1, "head_dim": 64, "block_n": 64})
    t = R.layout_terms(cfg, sms=6)
    assert t == {"tiles": 16, "programs": 6, "tail": 4, "parts": 2, "S": 3.0, "H": 0.5, "n_last": 2,
                 "I": pytest.approx(1 - 16 / 18)}
    assert R.layout_terms(cfg, sms=132)["S"] == 1.0 and R.layout_terms(cfg, sms=132)["tail"] == 0


def test_each_form_is_rule_21s_when_its_new_coefficient_is_zero(R, points):
    coef21 = R.R21.fit(points, "bytes_offset")
    base = R.R21.predict(points, "bytes_offset", coef21)
    for form in R.FORMS:
        got = R.R21.predict(points, form, {b: c + [0.0] for b, c in coef21.items()}, R.FORMS)
        np.testing.assert_allclose(got, base, rtol=1e-12)
        other = R.R21.predict(points, form, {b: c + [1.0] for b, c in coef21.items()}, R.FORMS)
        assert not np.allclose(other, base)


def test_the_scorer_reproduces_rule_21s_committed_figures(R):
    r21 = json.loads((data_dir() / "attention-extra/fa-rule21-posthoc-h200-pcie-host.json").read_text())
    want = r21["forms"]["bytes_offset"]
    got = R.posthoc(data_dir())["forms"]["bytes_offset"]
    for k in ("in_sample", "leave_one_point_out", "leave_one_call_out", "rule19_from_others"):
        assert (got[k]["within"], got[k]["n"]) == (want[k]["within"], want[k]["n"])
    assert (got["in_sample"]["within"], got["leave_one_point_out"]["within"], got["leave_one_call_out"]["within"]) \
        == (19, 18, 15)
    assert {b: s["within"] for b, s in got["leave_one_point_out"]["by_build"].items()} == \
        {b: s["within"] for b, s in want["leave_one_point_out"]["by_build"].items()}
    assert {c: s["within"] for c, s in got["leave_one_call_out"]["by_call"].items()} == \
        {c: s["within"] for c, s in want["leave_one_call_out"]["by_call"].items()}
    for b, c in want["coefficients"].items():
        assert got["coefficients"][b] == pytest.approx(c, rel=1e-9)


def _v(ins, lopo, loco):
    return {"in_sample": {"within": ins}, "leave_one_point_out": {"within": lopo},
            "leave_one_call_out": {"within": loco}}


def test_the_decision_rule(R):
    base = {"bytes_offset": _v(19, 18, 15)}
    assert R.decide({**base, "cover_after": _v(30, 18, 15), "last_batch": _v(30, 17, 20), "idle_tail": _v(1, 18, 14)}) \
        is None                                                   # not more LOCO, fewer LOPO, fewer LOCO
    assert R.decide({**base, "cover_after": _v(19, 18, 16), "last_batch": _v(19, 19, 16),
                     "idle_tail": _v(19, 30, 15)}) == "last_batch"   # ties on LOCO broken by LOPO
    assert R.decide({**base, "cover_after": _v(19, 18, 16), "last_batch": _v(19, 18, 16),
                     "idle_tail": _v(19, 18, 16)}) == "cover_after"  # full tie: the order of the table


def test_posthoc_record_recomputes_and_nothing_qualifies(R):
    rec = json.loads((data_dir() / R.POSTHOC).read_text())
    now = R.posthoc(data_dir())
    assert rec["decision"] is None and now["decision"] is None
    got = {k: R.counts(v) for k, v in now["forms"].items()}
    assert got == {k: R.counts(v) for k, v in rec["forms"].items()}
    assert got == {"bytes_offset": (19, 18, 15), "cover_after": (19, 14, 11), "last_batch": (24, 15, 9),
                   "idle_tail": (21, 15, 12)}
    assert rec["provenance"]["git_commit"] and "+dirty" not in rec["provenance"]["git_commit"]


def test_posthoc_cli_refuses_to_overwrite(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("{}")
    res = subprocess.run([sys.executable, str(BENCHMARKS / "fa_rule22.py"), "posthoc", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "already exists" in res.stderr
