"""The session-9 re-measurement of the recommended calibration (docs/calibration/wide-rerun.md): the records carry the
pre-registration commit and were measured after it, the split scored is the one recorded, and the committed
decision follows from the committed rows by the pre-registered checks (two-stage-gated2, eight checks)."""

import functools
import json

from xstage.paths import data_dir
from xstage.records import load_records
from xstage.sim.platform_fit import split_pairs

from .bench_scripts import load_script

EXTRA = data_dir() / "calibration-extra"


@functools.cache
def scores() -> dict:
    """The committed score record, read when a test asks for it (not at import: a GPU machine's tree has no data/)."""
    return json.loads((EXTRA / "wide-rerun-s9-scores.json").read_text())


def test_records_carry_the_preregistration_commit_and_the_scored_split():
    for target in ("pcie-host", "local"):
        pts, meta = load_records(EXTRA / f"h200-{target}-wide-3525cba" / "points.parquet", "point")
        assert meta["provenance"]["git_commit"].startswith("3525cba")
        pts = pts.reset_index(drop=True)
        assert (pts["split"].astype(str) == split_pairs(pts, 0.3, 0).reset_index(drop=True)).all()
    assert scores()["host_recorded_split_matches"] and scores()["local_recorded_split_matches"]
    assert scores()["split"] == {"rule": "pairs", "fraction": 0.3, "seed": 0} and scores()["post_hoc"] is False


def test_decision_follows_from_the_rows_by_the_preregistered_checks():
    law = load_script("calib_issue_law")
    rows = [r for r in scores()["rows"] if r["model"] == "two-stage-gated2"]
    assert {r["target"] for r in rows} == {"host", "local"} and all(r["heldout_n_points"] == 119 for r in rows)
    met = all(r[f"heldout_{key}"] <= limit for r in rows for key, limit in law.RULE_KEYS)
    assert scores()["decision"]["met"] is met is True
    assert "default" not in scores()["decision"]          # pre-registered to decide no default
    assert len(scores()["secondary_rows"]) == 8 and all(r["secondary"] for r in scores()["secondary_rows"])
