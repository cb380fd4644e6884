"""Rule 17 (``benchmarks/fa_rule17.py``): rule 14 at drift a + b x D_nl. The frozen line and its in-sample /
leave-one-run-out scores recompute from the committed in-pair records (``predictions/fa-rule17-posthoc-...``), and
the pre-registered judgement of the fresh run 24ac5e2-rule17 recomputes from its ``split_hbm`` launches alone
(``predictions/fa-rule17-judged-...``): supported, 5 of 5."""

import json

import numpy as np
import pytest

from xstage.paths import data_dir
from xstage.sim.predict_link import within

from .bench_scripts import load_script

POSTHOC = "predictions/fa-rule17-posthoc-h200-pcie-host.json"
JUDGED = "predictions/fa-rule17-judged-h200-pcie-host.json"
PRE = "attention-extra/fa-rule17-preregistered-h200-pcie-host.json"
RUN = "attention-runs/24ac5e2-rule17"


@pytest.fixture(scope="module")
def R():
    return load_script("fa_rule17")


def test_the_line_and_its_posthoc_scores_recompute(R):
    platform, base, _ = R.F.inputs()
    rec = json.loads((data_dir() / POSTHOC).read_text())
    pts = R.R16.build_points(base)
    line = R.fit_line(pts, platform)
    assert (line["a"], line["b"]) == (rec["line"]["a"], rec["line"]["b"]) == (0.00573, 0.57)
    assert {b: v["d_b"] for b, v in line["per_build"].items()} == {"d128-bn128": 0.017, "d128-bn64": 0.011,
                                                                    "d64-bn128": 0.012}
    for p in pts:
        p["rule17"] = R.answer(p, platform, R.drift17(line, p["D_nl"]))
    s = R.tally(pts, "rule17")
    assert (s["within"], s["new_builds_within"]) == (16, 2) == (rec["score"]["rule17"]["within"],
                                                                rec["score"]["rule17"]["new_builds_within"])
    assert [(p["run"].split("/")[-1], p["M"], p["heads"]) for p in pts if not within(p["rule17"], p["link_us"])] \
        == [("0dfa499-inpair", 49152, 4)]
    assert rec["qualifies"] == {"in_sample": "16/17", "new_builds": "2/2", "leave_one_run_out": "10/12",
                                "qualifies": True}
    assert {k: v["within"] for k, v in rec["leave_one_run_out"].items()} == \
        {"attention-runs/0dfa499-inpair": 6, "attention-runs/de0efae-rule13": 4}


def test_the_preregistration_froze_the_posthoc_line(R):
    pre = json.loads((data_dir() / PRE).read_text())
    assert (pre["a"], pre["b"]) == (0.00573, 0.57)
    assert [(p["M"], p["heads"], p["head_dim"], p["block_n"]) for p in pre["points"]] == \
        [(45056, 4, 64, 64), (32768, 6, 64, 64), (28672, 8, 64, 128), (49152, 3, 128, 64), (28672, 5, 128, 128)]


def test_the_fresh_run_is_judged_from_its_no_link_launches_alone(R):
    platform, base, _ = R.F.inputs()
    rec = json.loads((data_dir() / JUDGED).read_text())
    wd = R.R16.wave_drifts(base / RUN)
    line = {"a": 0.00573, "b": 0.57}
    meas = {(p["M"], p["heads"], p["head_dim"], p["block_n"]): p for p in R.F.measured_points(base / RUN, RUN)}
    n_in = 0
    for r in rec["points"]:
        key = (r["M"], r["heads"], r["head_dim"], r["block_n"])
        D_nl = float(np.median(wd[key]["nolink"]))          # every split_hbm launch of the point
        assert len(wd[key]["nolink"]) == 24 and D_nl == pytest.approx(r["D_nl"], rel=1e-12)
        # the predictor's inputs: the shape, the split_hbm median time and D_nl; nothing of the fused launches
        p = {"run": RUN, "M": r["M"], "heads": r["heads"], "head_dim": r["head_dim"], "block_n": r["block_n"],
             "nolink_us": meas[key]["nolink_us"]}
        pred = R.answer(p, platform, R.drift17(line, D_nl))
        assert pred == pytest.approx(r["rule17"], rel=1e-9)
        assert meas[key]["link_us"] == pytest.approx(r["link_us"])
        n_in += within(pred, meas[key]["link_us"])
    assert n_in == 5 and rec["verdict"] == "supported" == R.F.verdict(n_in, 5, 5)
    d = {(p["M"], p["head_dim"], p["block_n"]): round(p["D_nl"], 4) for p in rec["points"]}
    assert d[(45056, 64, 64)] == 0.0181 and d[(32768, 64, 64)] == 0.0185      # the never-run build reads ~0.018
    assert {k: v["within"] for k, v in rec["score"].items()} == {"rule17": 5, "rule14": 3, "rule16": 3}
