"""The one nearest-existing-folder walk (``xstage.paths.writable_folder``) behind both output checks:
``check_output`` (the CLI's files and folders) and ``output_folder`` (the GPU entry points, calibrate)."""

import pytest

from xstage.cli.common import check_output
from xstage.errors import InputError
from xstage.paths import output_folder, writable_folder


def test_the_walk_stops_at_the_nearest_existing_folder_and_creates_nothing(tmp_path):
    assert writable_folder("--out", tmp_path / "a" / "b" / "c.csv", tmp_path / "a" / "b") == tmp_path
    assert list(tmp_path.iterdir()) == []   # the probe file is gone, no folder made


@pytest.mark.parametrize("check", [
    lambda p: check_output("--out", p, suffixes=(".csv",)),
    lambda p: check_output("--out", p, folder=True),
    lambda p: output_folder(p),
])
def test_both_checks_refuse_a_path_below_a_file_the_same_way(tmp_path, check):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    target = blocker / "sub" / "out.csv"
    with pytest.raises(InputError) as caught:
        check(target)
    assert caught.value.field == "--out" and caught.value.value == str(target)
    assert f"cannot be created ({blocker} is not a folder)" in str(caught.value)
    assert blocker.read_text() == "x"


def test_check_output_accepts_an_existing_folder_and_a_new_file_in_it(tmp_path):
    assert check_output("--out", tmp_path, folder=True) == tmp_path
    assert check_output("--out", tmp_path / "new" / "x.csv", suffixes=(".csv",)) == tmp_path / "new" / "x.csv"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["dashboard", "report"])
def test_dashboard_and_report_refuse_an_unwritable_out_before_simulating(tmp_path, cli, command):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    target = blocker / "pages"
    code, out, err = cli(command, "--out", str(target))
    assert code == 2 and out == ""
    # one line, and no progress line: the check ran before the frames were computed
    assert err.splitlines() == [f"xstage: error: --out(='{target}') cannot be created ({blocker} is not a folder)"]
    assert blocker.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]
