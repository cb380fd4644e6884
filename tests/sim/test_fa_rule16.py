"""Rule 16 (``benchmarks/fa_rule16.py``): the drift read from a no-link launch's wave log
(``sim.predict_link.spread_drift``) on exact small cases, on the model's own timeline, and recomputed from the
committed in-pair records against the recorded post-hoc figures (``data/predictions/fa-rule16-posthoc-h200-pcie-host.json``): not qualified."""

import json

import numpy as np
import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.paths import data_dir
from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel
from xstage.sim.predict_congestion import SEQ, fused_items, item_ends
from xstage.sim.predict_link import spread_drift, within

from .bench_scripts import load_script

RECORD = "predictions/fa-rule16-posthoc-h200-pcie-host.json"


def waves(spreads, qloop=10.0, tiles=None):
    n = len(spreads)
    return pd.DataFrame({"wave": range(n), "tiles": tiles or [132] * n, "end_p10(us)": [100.0 * w for w in range(n)],
                         "end_p90(us)": [100.0 * w + s for w, s in enumerate(spreads)], "qloop_p50(us)": qloop})


def test_spread_drift_is_the_p10_p90_slope_over_0_8_qloop():
    assert spread_drift(waves([1.0, 1.8, 2.6, 3.4])) == pytest.approx(0.1)          # 0.8 us per wave / (0.8 x 10)
    # a split tail's part-wave (under 90 % of the fullest wave's tiles) is left out
    assert spread_drift(waves([1.0, 1.8, 2.6, 3.4, 50.0], tiles=[132] * 4 + [66])) == pytest.approx(0.1)
    assert spread_drift(waves([3.0, 2.0, 1.0])) == 0.0                               # closing up counts as 0
    with pytest.raises(InputError):
        spread_drift(waves([1.0, 2.0]))
    with pytest.raises(InputError):
        spread_drift(waves([1.0, 2.0, 3.0]).drop(columns="end_p10(us)"))


@pytest.mark.parametrize("drift", [0.0, 0.01, 0.017, 0.03])
def test_spread_drift_gives_the_model_its_own_drift_back(drift):
    """On the model's no-link timeline (programs evenly spread over [1 - d, 1]), the estimator returns d within 2 %."""
    k = FaKernel(seq_len=49152, heads=4, world_size=8, fa_us=9000.0, order="local_last", tail_parts=2,
                 fa_tail_parts=2, program_spread=drift, fa_program_spread=drift)
    sched, ml, *_ = fused_items(k, load_platform("h200-pcie-host"))
    f = pd.DataFrame({"wave": sched.tiles[:, SEQ], "end": item_ends(sched, ml), "q": ml})
    w = f.groupby("wave").agg(tiles=("end", "size"), **{"end_p10(us)": ("end", lambda x: np.quantile(x, .1)),
                                                          "end_p90(us)": ("end", lambda x: np.quantile(x, .9)),
                                                          "qloop_p50(us)": ("q", "median")}).reset_index()
    assert spread_drift(w) == pytest.approx(drift, rel=0.02, abs=1e-9)


def test_the_recorded_figures_recompute_from_the_committed_records():
    R = load_script("fa_rule16")
    platform, base, _ = R.F.inputs()
    rec = json.loads((data_dir() / RECORD).read_text())
    pts = R.build_points(base)
    assert len(pts) == 17 and sum(p["new_build"] for p in pts) == 2
    got = {(p["run"], p["M"], p["heads"], p["head_dim"], p["block_n"]): p for p in pts}
    for r in rec["points"]:
        p = got[(r["run"], r["M"], r["heads"], r["head_dim"], r["block_n"])]
        assert p["D_nl"] == pytest.approx(r["D_nl"], rel=1e-9) and p["link_us"] == pytest.approx(r["link_us"])
    by_build = {b: float(np.median([p["D_nl"] for p in pts if p["build"] == b])) for b in rec["D_nl_by_build"]}
    assert by_build == pytest.approx(rec["D_nl_by_build"])
    assert round(by_build["d128-bn128"], 4) == 0.0198 and round(by_build["d128-bn64"], 4) == 0.0096 \
        and round(by_build["d64-bn128"], 4) == 0.0106
    c = rec["fit_16c"]["c"]
    assert c == 0.85
    for key, drift in (("rule16", lambda p: p["D_nl"]), ("rule16c", lambda p: c * p["D_nl"])):
        for p in pts:
            p[key] = R.answer(p, platform, drift(p))
        s = R.tally(pts, key)
        assert (s["within"], s["new_builds_within"]) == (rec["score"][key]["within"],
                                                        rec["score"][key]["new_builds_within"])
    held = R.tally([p for p in pts if p["run"] not in R.FIT_RUNS], "rule16c")
    q = R.qualifies(R.tally(pts, "rule16"), R.tally(pts, "rule16c"), held)
    assert q == rec["qualifies"] == {"rule16": False, "rule16c": False, "preregister": None}
    assert (rec["score"]["rule16"]["within"], rec["score"]["rule16c"]["within"], held["within"]) == (12, 16, 4)
    # rule 16c misses only the head-dim-64 point: 115 us against 86
    miss = [p for p in pts if not within(p["rule16c"], p["link_us"])]
    assert [(p["M"], p["head_dim"]) for p in miss] == [(45056, 64)]
