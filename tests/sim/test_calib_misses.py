"""Which held-out (K, B) pairs a calibration misses (``xstage.sim.heldout_misses``; session 18): on fresh14's
committed median points, refitted through the product at ``--split-rule bracket`` seed 0 with ``two-stage-lockq``,
the summary lists the pairs docs/calibration/fresh14.md reports for seed 0, worst first, with knee ratios (the
(79, 29 KiB) miss at the knee, the (19, 43 KiB) one at small K far below it); the held-out figures stay the committed
ones; a simulated calibration that the model matches lists none; ``xstage calibrate`` and ``xstage results
calibration`` print at most 8 of them and carry all of them in --json; the study scripts use the product's
selection."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from xstage.cli import main
from xstage.cli.calib import MISSES_SHOWN, miss_lines
from xstage.compare.calibration_records import summarize_results
from xstage.hw.calib import calibrate
from xstage.sim import fit as calib_fit, heldout_misses as hm
from xstage.sim.calib_runner import SimRunner
from xstage.sim.platform import Platform
from xstage.records import load_records
from xstage.units import KiB, MiB

from .bench_scripts import load_script

FRESH14 = Path(__file__).resolve().parents[2] / "data" / "calibration-extra" / "h200-pcie-host-fresh14"
# docs/calibration/fresh14.md, seed 0: every held-out pair with a point off by > 15 %, its median error, points off
SEED0 = [(19, 43, 1.137, 2), (127, 25, 0.780, 1), (79, 29, -0.345, 1), (51, 37, 0.290, 1), (79, 37, -0.149, 1),
         (79, 33, -0.138, 1), (19, 33, -0.094, 1), (111, 29, 0.085, 1)]


@pytest.fixture(scope="module")
def fresh14(tmp_path_factory):
    out = tmp_path_factory.mktemp("misses") / "data" / "calibration" / "f14"
    summary = calibrate.refit(out, records=FRESH14, model="two-stage-lockq", split_args=(0.3, 0, "bracket"))
    return out, summary


def test_the_misses_are_fresh14_seed_0s_worst_first(fresh14):
    _, s = fresh14
    got = [(m["producers"], m["bytes_per_producer"] // KiB, round(m["median_rel_err_T_iss"], 3), m["n_off"])
           for m in s["heldout_misses"]]
    assert got == SEED0 and s["heldout_n_miss_pairs"] == 8
    assert all(m["n_points"] == 2 and m["bytes_per_producer"] % KiB == 0 for m in s["heldout_misses"])
    errs = [abs(m["median_rel_err_T_iss"]) for m in s["heldout_misses"]]
    assert errs == sorted(errs, reverse=True)


def test_the_misses_denominator_counts_the_held_out_lockstep_pairs_only(fresh14):
    out, s = fresh14
    held = {tuple(p) for p in s["split"]["heldout_pairs"]}
    points, _ = load_records(FRESH14 / "points.parquet", "point")
    periodic = points[points["mode"] == "periodic"]
    want = {(int(k), int(b)) for k, b in zip(periodic["producers"], periodic["bytes_per_producer"])} & held
    assert s["heldout_n_checked_pairs"] == len(want) == s["heldout_n_pairs"] == 15   # every held-out pair is lockstep here
    assert s["heldout_n_miss_pairs"] <= s["heldout_n_checked_pairs"]


def test_knee_ratios_put_79_29_at_the_knee_and_19_43_below_it(fresh14):
    _, s = fresh14
    ratio = {(m["producers"], m["bytes_per_producer"] // KiB): m["knee_ratio"] for m in s["heldout_misses"]}
    assert all(math.isfinite(r) for r in ratio.values())
    assert ratio[(79, 29)] == pytest.approx(1.0, abs=0.05)
    assert ratio[(19, 43)] < 0.6          # the small-K miss is the issue law's (b0 at 32 KiB), not the knee's


def test_the_held_out_figures_stay_the_committed_ones(fresh14):
    out, s = fresh14
    committed = json.loads((FRESH14 / "summary.json").read_text())
    for key in ("heldout_median_rel_err_T_iss", "heldout_p90_rel_err_T_iss", "heldout_median_rel_err_period",
                "heldout_p90_rel_err_period", "heldout_n_points", "heldout_n_pairs", "median_rel_err_T_iss"):
        assert s[key] == pytest.approx(committed[key], rel=1e-12, abs=1e-12), key
    platform = json.loads((out / "platform.json").read_text())     # no new key in the platform's model check
    assert not [k for k in platform["notes"]["model_check"] if "miss" in k]
    assert json.loads((out / "summary.json").read_text())["heldout_misses"] == s["heldout_misses"]


def test_knee_ratio_is_the_excess_over_q_and_none_without_a_capacity():
    plat = Platform(name="p", sm_count=132, drain_rate_GBps=50.0, t_fixed_us=1.0, producer_issue_GBps=20.0,
                    target="host", capacity_points=((132, 2 * MiB),))
    k, b = 66, 32 * KiB
    want = (k * b - 50e3 * plat.issue_time0_us(k, b)) / plat.capacity_bytes(k)
    assert hm.knee_ratio(plat, k, b) == pytest.approx(want, rel=1e-12)
    for q in (0.0, float("inf"), float("nan")):
        stub = SimpleNamespace(capacity_bytes=lambda _k, q=q: q, drain_rate_Bpus=50e3, issue_time0_us=lambda *_: 1.0)
        assert hm.knee_ratio(stub, k, b) is None


def test_a_calibration_the_model_matches_lists_no_misses(tmp_path):
    truth = Platform(name="synthetic-host", sm_count=132, drain_rate_GBps=50.0, t_fixed_us=1.5,
                     producer_issue_GBps=20.0, injection_GBps=400.0, target="host",
                     capacity_points=((33, 1 * MiB), (66, 2 * MiB), (132, 3 * MiB)))
    cfg = calibrate.CalibConfig(target="host", producers=(16, 66, 132), sizes=tuple(k * KiB for k in (8, 16, 32, 64)),
                                gap_configs=((132, 32 * KiB),), gap_fractions=(0.2, 0.8), iso_producers=(66, 132),
                                iso_sizes=tuple(k * KiB for k in (2, 8, 32, 128, 256)), bursts=12,
                                steady_bytes=8 * MiB, max_bursts=128, iso_bursts=3, trials=1, copy_engine=False,
                                heldout_fraction=0.5, split_seed=0)
    s = calibrate.run_calibration(cfg, SimRunner(truth), tmp_path / "o", progress=False, provenance_block={})
    assert s["heldout_n_pairs"] > 0 and s["heldout_misses"] == [] and s["heldout_n_miss_pairs"] == 0
    n = s["heldout_n_checked_pairs"]
    assert 0 < n <= s["heldout_n_pairs"]
    assert s["heldout_meets_targets"] is True
    assert miss_lines(s) == ["held-out check: meets the targets (median <= 5 %, p90 <= 15 % of T_iss and of the period)",
                             f"held-out pairs with a point off by > 15%: none of {n} held-out lockstep pairs"]


def test_no_split_no_field_and_an_older_summary_prints_nothing(tmp_path):
    points, _ = load_records(FRESH14 / "points.parquet", "point")
    plat = Platform.load(FRESH14 / "platform.json")
    from xstage.sim.platform_fit import check_and_summarize
    _, s = check_and_summarize(points, plat)
    assert "heldout_misses" not in s and "heldout_n_miss_pairs" not in s
    assert miss_lines(s) == [] and miss_lines(json.loads((FRESH14 / "summary.json").read_text())) == []


def test_the_block_shows_at_most_8_pairs():
    many = [{"producers": k, "bytes_per_producer": 16 * KiB, "median_rel_err_T_iss": 0.5 - k / 100, "n_off": 1,
             "n_points": 2, "knee_ratio": None if k == 1 else 1.0} for k in range(1, 12)]
    lines = miss_lines({"heldout_misses": many, "heldout_n_pairs": 20, "heldout_n_checked_pairs": 16})
    assert lines[0] == ("held-out pairs with a point off by > 15%: 11 of 16 held-out lockstep pairs (the worst 8 "
                        "by |median error|; --json lists all)")
    # a summary written before heldout_n_checked_pairs: the denominator is every held-out pair, and says so
    assert miss_lines({"heldout_misses": many, "heldout_n_pairs": 20})[0].startswith(
        "held-out pairs with a point off by > 15%: 11 of 20 held-out pairs (")
    rows = lines[2:-1]
    assert len(rows) == MISSES_SHOWN == 8
    assert rows[0].split() == ["1", "16", "+49.0%", "1/2", "-"] and rows[1].split()[-1] == "1.00"


def test_calibrate_and_results_print_the_block_and_valid_json(fresh14, capsys, tmp_path):
    out, s = fresh14
    capsys.readouterr()
    again = tmp_path / "again"
    assert main(["calibrate", "--refit", "--records", str(FRESH14), "--model", "two-stage-lockq", "--split-rule",
                 "bracket", "--out", str(again)]) == 0
    text = capsys.readouterr().out
    block = text[text.index("held-out pairs with a point off by > 15%: 8 of 15 held-out lockstep pairs"):].splitlines()
    assert block[2].split() == ["19", "43", "+113.7%", "2/2", "0.52"]
    assert block[4].split() == ["79", "29", "-34.5%", "1/2", "0.98"]
    assert "heldout_misses" not in text and "heldout_n_miss_pairs" in text
    data = out.parents[1]
    assert main(["results", "calibration", "--data", str(data), "--platform", "f14", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["heldout_misses"] == s["heldout_misses"] and got["heldout_n_miss_pairs"] == 8
    assert summarize_results(data, platform="f14")["heldout_misses"] == s["heldout_misses"]
    assert main(["results", "calibration", "--data", str(data), "--platform", "f14"]) == 0
    text = capsys.readouterr().out
    assert "+113.7%" in text and "heldout_misses" not in text
    assert main(["results", "calibration", "--data", str(data)]) == 0       # every folder: one block each
    assert capsys.readouterr().out.count("held-out pairs with a point off by") == 1


def test_the_study_scripts_use_the_products_selection(fresh14):
    out, s = fresh14
    k14 = load_script("calib_knee14")
    assert k14.missed_pairs is hm.missed_pairs
    points, _ = load_records(out / "points.parquet", "point")
    check = calib_fit.model_check(points, Platform.load(out / "platform.json"))
    want = sorted([[m["producers"], m["bytes_per_producer"] // KiB, round(m["median_rel_err_T_iss"], 4), m["n_off"],
                    m["n_points"]] for m in s["heldout_misses"]], key=lambda r: (r[0], r[1]))
    assert k14.held_misses(check, points["split"]) == want


def test_on_the_wide_grid_isolated_only_pairs_are_not_in_the_misses_denominator():
    wide = FRESH14.parent / "h200-pcie-host-wide"
    s = summarize_results(FRESH14.parents[1], platform="h200-pcie-host-wide")
    points, _ = load_records(wide / "points.parquet", "point")
    periodic = points[points["mode"] == "periodic"]
    lockstep = {(int(k), int(b)) for k, b in zip(periodic["producers"], periodic["bytes_per_producer"])}
    held = {tuple(p) for p in json.loads((wide / "summary.json").read_text())["split"]["heldout_pairs"]}
    assert s["heldout_n_checked_pairs"] == len(lockstep & held) < s["heldout_n_pairs"] == len(held)
    assert miss_lines(s)[1].startswith(f"held-out pairs with a point off by > 15%: {s['heldout_n_miss_pairs']} of "
                                       f"{s['heldout_n_checked_pairs']} held-out lockstep pairs")


def test_the_verdict_names_each_held_out_figure_that_misses(fresh14):
    _, s = fresh14
    assert s["heldout_meets_targets"] is False
    assert miss_lines(s)[0] == f"held-out check: misses the targets: p90_rel_err_T_iss {s['heldout_p90_rel_err_T_iss']:.1%} > 15%"
    assert s["heldout_p90_rel_err_T_iss"] > 0.15 and s["heldout_median_rel_err_T_iss"] <= 0.05
    figures = {key: 0.01 for key, _ in hm.TARGETS}
    assert hm.meets_targets(figures) is True
    assert hm.meets_targets({**figures, "heldout_median_rel_err_period": float("nan")}) is None
    assert hm.verdict({**figures, "heldout_median_rel_err_T_iss": 0.06, "heldout_p90_rel_err_period": 0.2}) == (
        "held-out check: misses the targets: median_rel_err_T_iss 6.0% > 5%, p90_rel_err_period 20.0% > 15%")
