"""Rule 19 (``benchmarks/fa_rule19.py``): the pairs-per-block sizing and the plan's frozen constants on exact cases,
the instrument's figures (block medians, self-agreement, bootstrap interval) on a small synthetic pair record, and
the committed judgement recomputed from the committed run ``a6c27c3-rule19``."""

import json

import numpy as np
import pandas as pd
import pytest

from xstage.paths import data_dir

from .bench_scripts import load_script

PLAN = "attention-extra/fa-rule19-preregistered-h200-pcie-host.json"
JUDGED = "predictions/fa-rule19-judged-h200-pcie-host.json"
RUN = "attention-runs/a6c27c3-rule19"


@pytest.fixture(scope="module")
def R():
    return load_script("fa_rule19")


def test_pairs_per_block_meets_the_band_and_is_clamped(R):
    # band 20 us (E 50 -> 0.2 x 50 = 10 < 20): (2.9 x 0.01 x 10000 / 20)^2 = 210.25 -> 211
    assert R.pairs_per_block(10_000.0, 50.0, 0.01) == 211
    # a wide band needs few pairs: clamped up to N_MIN; a long noisy kernel at the floor: clamped down to N_MAX
    assert R.pairs_per_block(4_000.0, 300.0, 0.011) == R.N_MIN
    assert R.pairs_per_block(15_000.0, 0.0, 0.011) == R.N_MAX
    assert R.pairs_per_block(10_000.0, -500.0, 0.01) == R.pairs_per_block(10_000.0, 500.0, 0.01)


def test_the_plan_freezes_the_committed_offset_constants(R):
    plan = json.loads((data_dir() / PLAN).read_text())
    const = R.offset_constants(data_dir())
    assert const == plan["offset_constants"]
    assert {b: round(v["beta_b"], 5) for b, v in const.items()} == \
        {"d128-bn128": 0.00845, "d128-bn64": 0.01764, "d64-bn128": -0.00157, "d64-bn64": -0.00387}
    assert {b: v["points"] for b, v in const.items()} == {"d128-bn128": 16, "d128-bn64": 2, "d64-bn128": 2,
                                                          "d64-bn64": 2}
    assert sum(p["fresh"] for p in plan["points"]) == 12 and len(plan["points"]) == 14


def synthetic(a_diff: float, b_diff: float, n: int = 10) -> pd.DataFrame:
    """Graph pairs of one point: block A's differences a_diff +- 1, block B's b_diff +- 1; two direct pairs."""
    rows = []
    for block, d in (("A", a_diff), ("B", b_diff)):
        for i in range(n):
            x = d + (1 if i % 2 else -1)
            rows.append({"protocol": "graph", "block": block, "variant": "v", "pair": i, "fa(us)": 1000.0,
                         "other(us)": 1000.0 + x, "diff(us)": x})
    rows += [{"protocol": "direct", "block": "-", "variant": "v", "pair": i, "fa(us)": 990.0, "other(us)": 1090.0,
              "diff(us)": 100.0} for i in range(2)]
    return pd.DataFrame(rows)


def test_the_instrument_scores_its_two_blocks_against_each_other(R):
    p = R.instrument_point(synthetic(100.0, 110.0), "v")
    assert (p["A_us"], p["B_us"], p["halves_agree"]) == (100.0, 110.0, True)
    assert p["pairs"] == 20 and p["direct_us"] == 100.0 and p["fa_us"] == 1000.0
    assert p["ci95_us"][0] <= p["median_us"] <= p["ci95_us"][1]
    assert p["inner_halves_agree"] == [True, True]
    # 0 against 25: within neither way (floor 20); 200 against 240: both ways (40 <= 0.2 x 200 and 0.2 x 240)
    assert R.instrument_point(synthetic(0.0, 25.0), "v")["halves_agree"] is False
    assert R.instrument_point(synthetic(200.0, 240.0), "v")["halves_agree"] is True
    with pytest.raises(Exception, match="no graph pairs"):
        R.instrument_point(synthetic(0.0, 0.0), "w")


def test_bootstrap_interval_is_seeded_and_brackets_the_median(R):
    x = np.arange(41.0)
    assert R.bootstrap_ci(x) == R.bootstrap_ci(x)
    lo, hi = R.bootstrap_ci(x)
    assert lo < 20.0 < hi and hi - lo < 20


def test_the_committed_judgement_recomputes_from_the_run(R):
    platform, base, _ = R.F.inputs()
    plan = json.loads((base / PLAN).read_text())
    pts = R.judge_points(*R.load_run(base / RUN), plan, platform)
    rec = json.loads((base / JUDGED).read_text())
    assert len(pts) == 14
    for p, q in zip(pts, rec["points"]):
        assert R.key(p) == R.key(q)
        assert p["E"]["median_us"] == pytest.approx(q["E"]["median_us"])
        assert p["E_18a"] == pytest.approx(q["E_18a"]) and p["E_18b"] == pytest.approx(q["E_18b"])
    sc = R.score(pts)
    assert sc == rec["score"]
    assert (sc["self_agreement_E"]["agree"], sc["instrument_ok"]) == (11, False)
    assert {r: (v["within"], v["met"]) for r, v in sc["rules"].items()} == \
        {"rule17": (4, False), "E_18a": (2, False), "E_18b": (5, False)}


def test_cli_refuses_to_overwrite_and_checks_its_flags(R, tmp_path):
    out = tmp_path / "x.json"
    out.write_text("{}")
    with pytest.raises(Exception, match="already exists"):
        R.main(["--judge", RUN, "--preregistered", PLAN, "--out", str(out)])
    with pytest.raises(Exception, match="is needed with --judge"):
        R.main(["--judge", RUN])
    with pytest.raises(Exception, match="no rule19-pairs"):
        R.main(["--judge", "attention-runs/ed474bb-rule18", "--preregistered", PLAN])
