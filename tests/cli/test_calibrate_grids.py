"""``xstage calibrate --grids``: every grid ``--grid`` takes, with its role, what it is for, its page and its shape."""

import json
from pathlib import Path

from xstage.hw.calib.grids import GRID_ROLE, GRIDS, describe_grid, grid_rows

ROOT = Path(__file__).resolve().parents[2]


def test_every_grid_has_one_role_and_an_existing_page_that_names_it():
    assert list(GRID_ROLE) == list(GRIDS)
    rows = grid_rows()
    assert {r["role"] for r in rows} == {"default", "recommended", "study"}
    assert [r["grid"] for r in rows if r["role"] == "default"] == ["default"]
    assert [r["grid"] for r in rows if r["role"] == "recommended"] == ["wide"]
    assert not [r["page"] for r in rows if not (ROOT / r["page"]).is_file()]
    for r in rows:
        if r["role"] == "study":   # a study page names its grid
            assert f"`{r['grid']}`" in (ROOT / r["page"]).read_text() or r["grid"] in (ROOT / r["page"]).read_text(), r
        assert r["shape"] == describe_grid(r["grid"])


def test_grids_lists_every_grid_with_its_shape_without_out(cli):
    code, out, err = cli("calibrate", "--grids")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == 2 * len(GRIDS)
    assert [line.split()[0] for line in lines[::2]] == list(GRIDS)
    assert lines[2].split()[:2] == ["wide", "recommended"] and "docs/calibration/wide-rerun.md" in lines[2]
    assert lines[3].split()[0] == "(K" and "x B 2,4,8,16,24,32,48,64,128,256 KiB" in lines[3]


def test_grids_json_is_the_rows(cli):
    code, out, _ = cli("calibrate", "--grids", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["default"] == "default" and doc["recommended"] == "wide"
    assert doc["grids"] == grid_rows()
