"""``benchmarks/calib_instrument21.py`` (session 21, post hoc): its committed record read back against the committed
runs. The instrument's figures at fresh16 seed 0 are recomputed here from points-runs.parquet without the script's
matching; a missed pair's runs, median and |e| are read from the parquet files by hand; combo18's rows equal the
pre-registered scores; knee18's rule gives the recorded verdicts; the small helpers are pinned on tiny frames; an
existing ``--json`` is refused before any fit."""
import functools
import json

import numpy as np
import pandas as pd
import pytest

from xstage.records import load_records
from xstage.sim.split_sweeps import split_by_rule

from .bench_scripts import load_script

i21 = load_script("calib_instrument21")


@functools.lru_cache(maxsize=1)
def record() -> dict:
    """The committed post hoc record, read when a test asks (the device tree travels without data/)."""
    return json.loads((i21.EXTRA / "instrument21-posthoc.json").read_text())


KiB = 1024


def _runs(grid):
    every, _ = load_records(i21.folder(grid) / "points-runs.parquet", "point")
    out = {}
    for n in (1, 2):
        p = every[(every["repeat"] == n) & (every["mode"] == "periodic")].reset_index(drop=True)
        p = p.assign(step=p.groupby(["phase", "producers", "bytes_per_producer"]).cumcount())
        out[n] = p.set_index(["phase", "producers", "bytes_per_producer", "step"])["T_iss(us)"]
    return out


def test_the_instrument_at_fresh16_seed_0_recomputed_from_the_runs():
    med, _ = load_records(i21.folder("fresh16") / "points.parquet", "point")
    med = med.reset_index(drop=True)
    s = split_by_rule(med, "bracket", 0.3, 0).reindex(med.index).to_numpy()
    held = {(int(k), int(b)) for k, b, x in zip(med["producers"], med["bytes_per_producer"], s) if x == "heldout"}
    r = _runs("fresh16")
    both = pd.concat({"r1": r[1], "r2": r[2]}, axis=1, join="inner")
    both = both[[(k, b) in held for _, k, b, _ in both.index]]
    figs = {}
    for a, b in (("r1", "r2"), ("r2", "r1")):
        e = np.abs(both[a] / both[b] - 1)
        figs[a, b] = (float(np.median(e)), float(np.percentile(e, 90)))
    row = record()["grids"]["fresh16"]["by_seed"][0]
    assert row["seed"] == 0 and row["n_points"] == len(both) == 30
    for (a, b), (m, p90) in figs.items():
        assert row["instrument"]["by_pair"][f"{a}->{b}"]["T_iss"]["median"] == pytest.approx(m, abs=1e-12)
        assert row["instrument"]["by_pair"][f"{a}->{b}"]["T_iss"]["p90"] == pytest.approx(p90, abs=1e-12)
    assert row["instrument"]["p90_T_iss"] == pytest.approx((figs["r1", "r2"][1] + figs["r2", "r1"][1]) / 2, abs=1e-12)
    assert 0.11 < row["instrument"]["p90_T_iss"] < 0.12          # 11.6 %, the page's figure


def test_a_missed_pair_read_by_hand_fresh16_83_at_29_25_KiB_zero_gap():
    b = int(29.25 * KiB)
    r = _runs("fresh16")
    r1, r2 = r[1][("rate", 83, b, 0)], r[2][("rate", 83, b, 0)]
    assert (r1, r2) == pytest.approx((0.896, 2.112))               # one run free, the other caught
    pair = next(p for p in record()["grids"]["fresh16"]["missed_pairs"] if (p["K"], p["B_bytes"]) == (83, b))
    pt = next(p for p in pair["points"] if p["phase"] == "rate")
    assert pt["T_iss_r1_us"] == r1 and pt["T_iss_r2_us"] == r2 and pt["T_iss_median_us"] == pytest.approx((r1 + r2) / 2)
    assert pt["e_r1_r2"] == pytest.approx(0.896 / 2.112 - 1) and abs(pt["e_r1_r2"]) > 0.5
    assert pt["e_r2_r1"] == pytest.approx(2.112 / 0.896 - 1)
    assert pair["missed_at_seeds"] == [0, 1, 3]
    for s in map(str, pair["missed_at_seeds"]):                   # combo18 lands between the runs, off the median
        assert r1 < pt["combo18_us"][s] < r2 and pt["e_combo18"][s] > 0.15
        assert pt["e_combo18"][s] == pytest.approx(pt["combo18_us"][s] / ((r1 + r2) / 2) - 1)


def test_combo18_rows_are_the_pre_registered_scores_and_the_verdicts_follow_knee18s_rule():
    for grid in ("fresh15", "fresh16"):
        score = json.loads((i21.EXTRA / f"{grid}-scores.json").read_text())
        want = {r["seed"]: r for r in score["rows"] if r["candidate"] == "combo18"}
        g = record()["grids"][grid]
        assert g["combo18_seeds_all_four"] == score["decision"]["seeds_met"]
        for r in g["by_seed"]:
            assert r["combo18"]["p90_rel_err_T_iss"] == want[r["seed"]]["heldout_p90_rel_err_T_iss"]
            assert r["combo18"]["misses"] == want[r["seed"]]["misses"]
    for grid, g in record()["grids"].items():
        rows = [r["instrument"] for r in g["by_seed"]]
        assert g["verdict_knee18_terms"] == i21.verdict(rows) == "within the instrument", grid
        assert g["instrument_seeds_p90_over_15"] == 0 and g["median_is_mean_of_runs_max_abs_us"] == 0.0
    assert record()["post_hoc"] is True and "decides nothing" in record()["note"]


def test_the_rule_turns_on_two_seeds_over_15_percent():
    row = {"median_T_iss": 0.01, "p90_T_iss": 0.10, "median_period": 0.01, "p90_period": 0.01}
    over = dict(row, p90_T_iss=0.16)
    assert i21.verdict([row] * 5) == "within the instrument"
    assert i21.verdict([over] + [row] * 4) == "within the instrument"
    assert i21.verdict([over] * 2 + [row] * 3) == "beyond the instrument"
    assert i21.verdict([dict(row, median_T_iss=0.06)] * 2 + [row] * 3) == "at the edge"


def test_instrument_misses_and_points_off_on_a_tiny_frame():
    sub = pd.DataFrame({"producers": [8, 8, 9, 9], "bytes_per_producer": [4096, 4096, 2048, 2048],
                        "T_iss(us)_r1": [1.0, 2.0, 1.0, 1.0], "T_iss(us)_r2": [1.0, 1.0, 1.1, 1.0],
                        "T_iss(us)_median": [1.0, 1.5, 1.05, 1.0], "combo18_s0": [1.2, 1.8, 1.0, 1.0]})
    assert i21.instrument_misses(sub, "r1", "r2") == [[8, 4096, 0.5, 1, 2]]
    assert i21.instrument_misses(sub, "r2", "r1") == [[8, 4096, -0.25, 1, 2]]
    # off the median by > 15 %: (8, 4096) both points (+20 %, +20 %); the second lies between its runs (1 and 2),
    # whose runs are 100 % apart; the first is above both (1, 1)
    assert i21.points_off(sub, 0) == {"n": 2, "between_runs": 1, "runs_apart": 1}


def test_an_existing_json_is_refused_before_any_fit(tmp_path, capsys):
    taken = tmp_path / "out.json"
    taken.write_text("{}")
    with pytest.raises(SystemExit) as stop:
        i21.main(["--json", str(taken)])
    assert stop.value.code == 2 and taken.read_text() == "{}"
    assert capsys.readouterr().err.startswith("calib_instrument21: error:")
