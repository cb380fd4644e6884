"""``benchmarks/calib_pool18.py`` (session 18, post hoc): the rule of data/calibration-extra/pool18-criterion.md
(ready iff the pooled candidate meets all four checks at >= 4 of 5 seeds on each of six knee folders; the baseline
judges nothing), the committed score's decision read back from its rows, and an existing ``--json`` refused before
any fit."""
import json

import pytest

from .bench_scripts import load_script

p18 = load_script("calib_pool18")
SCORES = p18.EXTRA / "pool18-posthoc.json"


def _rows(met_by_grid: dict, candidate="pool18") -> list:
    return [{"grid": g, "candidate": candidate, "seed": s, "all_four": s < n} for g, n in met_by_grid.items()
            for s in range(5)]


def test_ready_needs_four_of_five_on_every_knee_folder_and_only_the_candidate_counts():
    every = {g: 4 for g in p18.FOLDERS}
    assert p18.decide(_rows(every) + _rows({g: 0 for g in p18.FOLDERS}, "lockq"))["ready"] is True
    one_short = {**every, "fresh10": 3}
    d = p18.decide(_rows(one_short) + _rows({g: 5 for g in p18.FOLDERS}, "lockq"))
    assert d["ready"] is False and d["seeds_met"]["fresh10 pool18"] == 3 and d["seeds_met"]["fresh10 lockq"] == 5


def test_the_pool_is_knee10s_five_broad_host_grids_and_none_is_a_knee_folder():
    names = [p.name for p in p18.POOL]
    assert names == ["h200-pcie-host-wide", "h200-pcie-host-wide-3525cba", "h200-pcie-host-fresh",
                     "h200-pcie-host-fresh2", "h200-pcie-host-fresh3"]
    knee = {f"h200-pcie-host-{r}" for runs in p18.FOLDERS.values() for r in runs}
    assert not knee & set(names) and all((p / "points.parquet").is_file() for p in p18.POOL)


def test_the_committed_score_reads_back_from_its_rows():
    s = json.loads(SCORES.read_text())
    rows = s["rows"]
    assert s["post_hoc"] is True and len(rows) == len(p18.FOLDERS) * len(p18.CANDIDATES) * 5
    for r in rows:   # each row's verdict is its four figures against the target
        assert r["all_four"] == (r["heldout_median_rel_err_T_iss"] <= 0.05 and r["heldout_p90_rel_err_T_iss"] <= 0.15
                                 and r["heldout_median_rel_err_period"] <= 0.05
                                 and r["heldout_p90_rel_err_period"] <= 0.15)
    assert s["decision"] == p18.decide(rows)
    assert s["provenance"]["git_commit"]


def test_an_existing_json_is_one_line_and_exit_2_before_any_fit(tmp_path, capsys):
    taken = tmp_path / "scores.json"
    taken.write_text("{}")
    with pytest.raises(SystemExit) as stop:
        p18.main(["--json", str(taken)])
    assert stop.value.code == 2 and taken.read_text() == "{}"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "calib_pool18: error: --json" in err[0]
