"""``xstage compare``: prints the side-by-side table, writes CSV / Parquet, refuses bad input."""

import json

import pandas as pd
import pytest

from xstage.cli import main
from xstage.records import save_records
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import load_platform


@pytest.fixture(scope="module")
def bursts(tmp_path_factory):
    p = load_platform("paper-b200")
    frames = []
    for mode, K, B, G in [("periodic", 148, 32768, 0.0), ("isolated", 148, 65536, 0.0)]:
        b = simulate_bursts(p, BurstConfig(K, B, G, bursts=8, mode=mode)).bursts.assign(source="hw")
        b["issue(us)"] *= 1.05
        frames.append(b)
    path = tmp_path_factory.mktemp("cmp") / "bursts.parquet"
    save_records(path, "burst", pd.concat(frames, ignore_index=True), {"config": {}})
    return path


def test_compare_writes_csv_and_parquet(bursts, tmp_path, capsys):
    assert main(["compare", str(bursts), "--out", str(tmp_path / "rows.csv")]) == 0
    out = capsys.readouterr().out
    assert "issue_median_rel_err" in out and "measured_issue(us)" in out
    rows = pd.read_csv(tmp_path / "rows.csv")
    assert len(rows) == 2 and rows["issue_rel_err"].round(6).tolist() == [round(0.05 / 1.05, 6)] * 2
    assert main(["compare", str(bursts), "--out", str(tmp_path / "rows.parquet"), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["bursts"]["n_experiments"] == 2
    assert len(pd.read_parquet(tmp_path / "rows.parquet")) == 2


def test_compare_bad_input_is_one_line_and_exit_2(bursts, tmp_path, capsys):
    assert main(["compare", str(tmp_path / "missing.parquet")]) == 2
    assert main(["compare", str(bursts), "--out", str(tmp_path / "rows.txt")]) == 2
    assert main(["compare", str(bursts), "--platform", "no-such-platform"]) == 2
    (tmp_path / "exists.csv").write_text("x\n")
    assert main(["compare", str(bursts), "--out", str(tmp_path / "exists.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("xstage: error:") for line in err)


def test_compare_every_kind_of_record(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("dash_records", Path(__file__).parents[1] / "dash_records.py")
    records = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(records)
    files = sorted(str(p) for p in records.write_measured_like(tmp_path).rglob("*.parquet"))
    assert main(["compare", *files, "--json", "--out", str(tmp_path / "all.parquet")]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert set(metrics) == {"calibration points", "bursts", "attention", "moe", "attention_tiles", "tiles"}
    assert metrics["moe"]["speedup_sign_agreement"] == 1.0
    # the split calibration folder's points: simulated T_iss x 1.03, re-simulated on paper-b200
    assert metrics["calibration points"]["issue_median_rel_err"] == pytest.approx(0.03 / 1.03, rel=1e-6)
    rows = pd.read_parquet(tmp_path / "all.parquet")
    assert set(rows["experiment"]) == {"calibration points", "bursts", "attention", "moe", "attention tiles", "tiles"}
