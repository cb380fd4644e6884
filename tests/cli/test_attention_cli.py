"""``xstage attention``: the layout view, bad input as one line and exit 2."""

import json

import pytest

from xstage.cli import main


def test_layout_json(capsys):
    assert main(["attention", "layout", "--seq-len", "8192", "--heads", "3", "--world-size", "8", "--rank", "2",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["chunk_rows"] == 1024 and out["dest_shape"] == [1024, 24, 128] and out["tiles"] == 192
    assert out["remote_bytes"] == 8192 * 3 * 128 * 2 * 7 // 8
    by_rank = {r["dest_rank"]: r for r in out["rows"]}
    assert by_rank[2]["bytes_remote"] == 0 and by_rank[3]["bytes_remote"] == 24 * 128 * 128 * 2
    assert all(r["dest_head0"] == 6 for r in out["rows"])


def test_layout_bad_input_is_one_line_exit_2(capsys):
    assert main(["attention", "layout", "--seq-len", "1000", "--world-size", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xstage: error: ")


def test_check_bad_head_dim_exit_2(capsys):
    assert main(["attention", "check", "--seq-len", "1024", "--head-dim", "96"]) == 2
    assert "head_dim(=96)" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["attention", "check", "--seq-len", "256", "--head-dim", "64", "--block-m", "16", "--block-n", "16",
     "--world-size", "4"],
    ["moe", "check", "--hidden", "64", "--intermediate", "32", "--tokens", "70", "--block-m", "16", "--block-n", "32",
     "--block-k", "16"],
    ["moe", "run", "--out", "never-written"],
    ["attention", "run", "--out", "never-written"]])
def test_check_without_gpu_libraries_is_one_line(argv):
    """No torch / triton: one line naming what to install, exit 2 (not a ModuleNotFoundError traceback)."""
    import subprocess
    import sys

    code = ("import sys; sys.modules.update(torch=None, triton=None); from xstage.cli import main; "
            f"sys.exit(main({argv!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install" in lines[0] and "environment" in lines[0]
