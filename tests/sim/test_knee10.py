"""The session-10 fresh10 run (docs/calibration/knee10.md): the records carry the pre-registration commit, which
is in this branch's history before them; the split scored is the one recorded; the committed decision follows from
the committed rows by the pre-registered checks (pooled two-stage-gated2, four per target); the scoring script's
bad input is one line, exit 2."""

import functools
import json
import subprocess

import pytest

from xstage.paths import data_dir
from xstage.records import load_records
from xstage.sim.platform_fit import split_pairs

from .bench_scripts import load_script

EXTRA = data_dir() / "calibration-extra"


@functools.cache
def scores() -> dict:
    """The committed score record, read when a test asks for it (not at import: a GPU machine's tree has no data/)."""
    return json.loads((EXTRA / "knee10-fresh10-scores.json").read_text())


def test_records_carry_the_preregistration_commit_and_the_scored_split():
    for target in ("pcie-host", "local"):
        pts, meta = load_records(EXTRA / f"h200-{target}-fresh10" / "points.parquet", "point")
        sha = meta["provenance"]["git_commit"]
        assert sha.startswith("4b1812d")
        pts = pts.reset_index(drop=True)
        assert (pts["split"].astype(str) == split_pairs(pts, 0.3, 0).reset_index(drop=True)).all()
    assert scores()["host_recorded_split_matches"] and scores()["local_recorded_split_matches"]
    assert scores()["split"] == {"rule": "pairs", "fraction": 0.3, "seed": 0} and scores()["post_hoc"] is False
    shown = subprocess.run(["git", "show", f"{sha}:data/calibration-extra/knee10-preregistration.md"],
                           cwd=EXTRA, capture_output=True, text=True)
    if shown.returncode != 0 and "unknown revision" in shown.stderr + shown.stdout:
        pytest.skip("a shallow checkout without the pre-registration commit")
    assert shown.returncode == 0 and "fresh10" in shown.stdout


def test_decision_follows_from_the_rows_by_the_preregistered_checks():
    knee10 = load_script("calib_knee10")
    rows = scores()["rows"]
    assert {(r["target"], r["seed"], r["fit"]) for r in rows} == {("host", 0, "pooled"), ("local", 0, "pooled")}
    assert all(p["grid"] for r in rows for p in r["pool"]) and [len(r["pool"]) for r in rows] == [5, 5]
    met = {r["target"]: all(r[f"heldout_{key}"] <= limit for key, limit in knee10.RULE_KEYS) for r in rows}
    assert scores()["decision"]["met"] == met == {"host": False, "local": True}
    assert scores()["decision"]["recommend_pool"] == ["local"]
    assert len(scores()["secondary_rows"]) == 18        # own-only at seed 0, both fits at seeds 1-4, per target


def test_bad_targets_is_one_line_exit_2(capsys):
    knee10 = load_script("calib_knee10")
    assert knee10.main(["bracket", "--targets", "host,gpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--targets" in err[0] and "'gpu'" in err[0]
