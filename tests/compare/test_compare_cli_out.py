"""``xstage compare --out``: a folder of records (one per experiment) or one file, never overwritten
unasked; a reader that closes the pipe early gets no traceback."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from xstage.cli import main
from xstage.records import load_records

DATA = Path(__file__).parents[1] / "golden" / "data"


def test_out_folder_holds_one_record_per_experiment_and_the_metrics(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", str(DATA / "attention"), "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in out.iterdir()) == ["attention-tiles.parquet", "attention.parquet", "metrics.json"]
    assert json.loads((out / "metrics.json").read_text()) == printed
    rows, meta = load_records(out / "attention.parquet", "summary")
    assert meta["compare"]["experiment"] == "attention" and meta["compare"]["records"] == [str(DATA / "attention")]
    assert meta["metrics"] == printed["attention"] and list(rows["M"]) == [8192, 16384]
    # never overwritten unasked; with --overwrite replaced whole (a stale file goes)
    (out / "stale.parquet").write_text("x")
    assert main(["compare", str(DATA / "moe"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--overwrite" in err and (out / "attention.parquet").exists()
    assert main(["compare", str(DATA / "moe"), "--out", str(out), "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "moe.parquet"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_out_parquet_is_a_summary_record_of_all_rows(tmp_path, capsys):
    out = tmp_path / "rows.parquet"
    assert main(["compare", str(DATA / "moe"), str(DATA / "attention"), "--json", "--out", str(out)]) == 0
    metrics = json.loads(capsys.readouterr().out)
    rows, meta = load_records(out, "summary")
    assert set(rows["experiment"]) == {"moe", "attention", "attention tiles"}
    assert meta["metrics"]["moe"] == metrics["moe"]
    assert len(pd.read_parquet(out)) == len(rows)
    assert main(["compare", str(DATA / "moe"), "--out", str(tmp_path / "rows.txt")]) == 2
    assert "rows.txt" in capsys.readouterr().err


def test_a_closed_pipe_is_quiet():
    """``xstage compare ... | head -0``: the reader is gone before anything is written."""
    proc = subprocess.Popen([sys.executable, "-m", "xstage.cli", "compare", str(DATA / "moe")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err
