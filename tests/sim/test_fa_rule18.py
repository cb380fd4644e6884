"""Rule 18 and the instrument (``benchmarks/fa_rule18.py``): the agreement counts on exact small cases, the committed
figures recomputed from the committed in-pair records (``predictions/fa-rule18-{instrument,offset,judged}-...``),
the leave-one-point-out offset candidates (none qualifies), and the repeat run's triples."""

import json

import pytest

from xstage.paths import data_dir

from .bench_scripts import load_script

INSTRUMENT = "predictions/fa-rule18-instrument-h200-pcie-host.json"
OFFSET = "predictions/fa-rule18-offset-h200-pcie-host.json"
JUDGED = "predictions/fa-rule18-judged-h200-pcie-host.json"
RUN = "attention-runs/ed474bb-rule18"


@pytest.fixture(scope="module")
def R():
    return load_script("fa_rule18")


@pytest.fixture(scope="module")
def committed(R):
    return R.inpair_points(data_dir())


def test_agreement_counts_every_ordered_pair_in_the_target_band(R):
    # 100 / 110 agree both ways (10 <= 20); 150 is 40-50 away from both: band max(20, 0.2 |b|) = 20-30
    a = R.agreement([[100.0, 110.0, 150.0]])
    assert (a["pairs_within"], a["pairs"], a["groups_all_agree"], a["groups"]) == (2, 6, 0, 1)
    # the band is relative to the measurement predicted: 0 -> 21 misses (floor 20), 200 -> 240 agrees (0.2 x 240 =
    # 48) but 240 -> 200 agrees too (40 <= 40); a group of one and missing values do not count
    a = R.agreement([[0.0, 21.0], [200.0, 240.0], [5.0], [None, 7.0]])
    assert (a["pairs_within"], a["pairs"], a["groups_all_agree"], a["groups"]) == (2, 4, 1, 2)
    assert R.agreement([])["share"] is None
    c = R.cross([100.0, 0.0], [125.0, 25.0])          # 100 -> 125 within (25 <= 25), 125 -> 100 not (25 > 20)
    assert c == {"a_predicts_b": 1, "b_predicts_a": 0, "both": 0, "n": 2}


def test_qualification_needs_18_of_22_and_every_build(R):
    four = {"d128-bn128": 14, "d128-bn64": 1, "d64-bn128": 2, "d64-bn64": 1}
    assert R.qualifies({"within": 18, "by_build": four})
    assert not R.qualifies({"within": 17, "by_build": four})
    assert not R.qualifies({"within": 20, "by_build": {**four, "d64-bn64": 0}})
    assert not R.qualifies({"within": 20, "by_build": {"d128-bn128": 20}})


def test_the_inpair_points_pool_as_the_committed_link_cost_records(R, committed):
    assert len(committed) == 22
    r17 = json.loads((data_dir() / "predictions/fa-rule17-judged-h200-pcie-host.json").read_text())["points"]
    by = {(p["M"], p["heads"], p["head_dim"], p["block_n"]): p for p in committed if "24ac5e2" in p["run"]}
    for q in r17:
        p = by[(q["M"], q["heads"], q["head_dim"], q["block_n"])]
        assert (p["E_ip"], p["L"], p["O"]) == pytest.approx((q["d_split_us"], q["link_us"], q["d_hbm_us"]))
        assert [r["L"] for r in p["reps"].values()] == pytest.approx(q["link_reps_us"])
        assert [r["E_std"] for r in p["reps"].values()] == pytest.approx(q["s_reps_us"])
    p = by[(49152, 3, 128, 64)]                           # the repeat that put L at 495 us
    assert [round(r["E_ip"]) for r in p["reps"].values()] == [94, 332, 85]


def test_the_instrument_figures_recompute(R):
    rec = json.loads((data_dir() / INSTRUMENT).read_text())
    res = R.instrument(None)
    for q, (w, n, ok) in {"E_ip": (74, 120, 7), "E_std": (75, 120, 10), "L": (81, 120, 11),
                          "O": (88, 120, 12)}.items():
        a = res["single_repeats"][q]
        assert (a["pairs_within"], a["pairs"], a["groups_all_agree"]) == (w, n, ok)
        assert rec["single_repeats"][q] == a
    assert res["inpair_vs_standard_pooled"] == {"a_predicts_b": 11, "b_predicts_a": 10, "both": 10, "n": 22}
    assert (res["standard_across_runs"]["pairs_within"], res["standard_across_runs"]["pairs"]) == (44, 60)
    assert res["standard_single_repeats_by_build"]["d128-bn128"]["share"] == 0.5
    b = res["offset_relative_by_build"]
    assert round(b["d128-bn128"]["beta_median"], 4) == 0.0085 and round(b["d64-bn64"]["beta_median"], 4) == -0.0039


def test_no_offset_candidate_qualifies_leave_one_point_out(R, committed):
    rec = json.loads((data_dir() / OFFSET).read_text())
    pts = R.offset_answers([dict(p) for p in committed], R.rule17_answers(data_dir()))
    for k, (pred, meas) in R.CANDIDATES.items():
        t = R.tally(pts, pred, meas)
        assert t["within"] == rec["candidates"][k]["within"]
        assert not R.qualifies(t)
    assert {k: v["within"] for k, v in rec["candidates"].items()} == {"18a": 15, "18b": 15, "18m": 9}
    assert rec["qualifies"] == {"18a": False, "18b": False, "18m": False}
    # each point's constants come from the other points only: a build's beta moves with the point left out
    bn64 = [p["beta_b"] for p in pts if p["head_dim"] == 128 and p["block_n"] == 64]
    assert sorted(round(x, 4) for x in bn64) == [0.0139, 0.0213]
    assert R.tally(pts, "O_18a", "O")["within"] == 18


def test_the_repeat_run_judgement_recomputes_from_its_triples(R):
    rec = json.loads((data_dir() / JUDGED).read_text())
    assert [len(p["reps"]) for p in rec["points"]] == [8, 8, 8, 7]       # the 185 s cut in repeat 7
    assert all([t["reps"] for t in p["triples"]] == [[0, 1, 2], [3, 4, 5]] for p in rec["points"])
    assert {q: (a["pairs_within"], a["pairs"]) for q, a in rec["triples"].items()} == \
        {"E_ip": (4, 8), "E_std": (6, 8), "L": (6, 8), "O": (8, 8)}
    assert {q: a["groups_all_agree"] for q, a in rec["committed_and_triples"].items()} == \
        {"E_ip": 2, "E_std": 2, "L": 2, "O": 4}
    base = data_dir()
    pts = R.inpair_reps(base / RUN, RUN)
    p = next(p for p in pts if (p["M"], p["head_dim"], p["block_n"]) == (49152, 128, 64))
    assert [round(r["E_std"]) for r in p["reps"].values()][:3] == [292, 299, 302]


def test_cli_refuses_to_overwrite_and_checks_its_flags(R, tmp_path):
    out = tmp_path / "x.json"
    out.write_text("{}")
    with pytest.raises(Exception, match="already exists"):
        R.main(["--instrument", "--out", str(out)])
    with pytest.raises(Exception, match="applies to --judge"):
        R.main(["--instrument", "--committed"])
    with pytest.raises(Exception, match="no inpair-launch"):
        R.main(["--judge", "attention-runs/49d9e81"])
    R.main(["--offset", "--out", str(tmp_path / "y.json")])
    assert json.loads((tmp_path / "y.json").read_text())["qualifies"]["18a"] is False
