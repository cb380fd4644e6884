"""``xstage trace``: Chrome trace-event JSON of tile and burst records, checked event by event after
loading the written file back, on a simulated replay, simulated bursts and slices of committed
measured records."""

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xstage.cli import main
from xstage.records import load_records, save_records
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.platform import load_platform
from xstage.trace import TIDS, XSTAGE_PID, XSTAGE_TIDS, run_groups

ROOT = Path(__file__).resolve().parents[2]
COUNTERS = {"issue rate (GB/s)": "GBps", "issued (MiB)": "MiB"}


def _no_nan(text):
    raise AssertionError(f"{text} in the trace: not JSON")


def write_and_load(records: Path, out: Path, *extra) -> dict:
    assert main(["trace", str(records), "--out", str(out), *extra]) == 0
    return json.loads(out.read_text(), parse_constant=_no_nan)


def check_every_event(doc: dict, frame: pd.DataFrame, kind: str) -> Counter:
    """Assert the shape of every event and that the events account for every row; returns the counts."""
    events = doc["traceEvents"]
    unit = "sm" if kind == "tile" else "producer"
    want_pids = {int(v) + 1 for v in frame[unit].unique()}
    names, threads, counts = {}, set(), Counter()
    for e in events:
        assert e["ph"] in ("M", "X", "C") and isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name")
            if e["name"] == "process_name":
                assert e["pid"] not in names
                names[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                assert isinstance(e["tid"], int) and isinstance(e["args"]["name"], str)
                threads.add((e["pid"], e["tid"]))
            else:
                assert isinstance(e["args"]["sort_index"], int)
            continue
        assert isinstance(e["ts"], float) and math.isfinite(e["ts"]) and e["ts"] >= 0
        if e["ph"] == "C":
            assert e["pid"] == XSTAGE_PID and set(e["args"]) == {COUNTERS[e["name"]]}
            value = e["args"][COUNTERS[e["name"]]]
            assert isinstance(value, float) and math.isfinite(value) and value >= 0
            counts["C"] += 1
            continue
        assert isinstance(e["dur"], float) and math.isfinite(e["dur"]) and e["dur"] >= 0
        assert isinstance(e["tid"], int) and isinstance(e["cat"], str) and isinstance(e["args"], dict)
        assert (e["pid"], e["tid"]) in threads, e          # metadata events come first
        if e["pid"] == XSTAGE_PID:
            assert e["tid"] == XSTAGE_TIDS[{"run": "runs", "drain": "drain"}[e["cat"]]]
        else:
            assert e["pid"] in want_pids and e["tid"] in TIDS[kind].values()
        counts[e["cat"]] += 1
    # one process per SM or producer, named after it, plus the X-Stage
    assert set(names) == want_pids | {XSTAGE_PID}
    assert all(names[p] == f"{'SM' if kind == 'tile' else 'producer'} {p - 1}" for p in want_pids)
    assert counts["run"] == len(list(run_groups(frame, kind))) == doc["otherData"]["runs"]
    assert doc["otherData"]["rows"] == len(frame)
    if kind == "tile":
        stall = np.nan_to_num(frame["mma_stall(us)"].to_numpy(float))
        assert counts["mainloop"] == counts["store"] == len(frame)
        assert counts["stall"] == int((stall > 0).sum())
    else:
        assert counts["issue"] == len(frame)
    return counts


def check_spans_match_the_records(doc: dict, frame: pd.DataFrame, kind: str) -> None:
    """Per run, every event's duration and its start relative to the run are the records' own."""
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    runs = [e for e in xs if e["cat"] == "run"]
    for (label, rows), run in zip(run_groups(frame, kind), runs):
        assert run["name"] == label and run["args"]["rows"] == len(rows)
        inside = [e for e in xs if e["cat"] not in ("run", "drain") and run["ts"] <= e["ts"] <= run["ts"] + run["dur"] + 1e-6]
        if kind == "tile":
            base = min((rows["mainloop_start(us)"] - rows["mma_stall(us)"].fillna(0)).min(), rows["issue_start(us)"].min())
            ml = sorted(e["ts"] - run["ts"] for e in inside if e["cat"] == "mainloop")
            assert np.allclose(ml, np.sort(rows["mainloop_start(us)"] - base), atol=1e-6)
            durs = sorted(e["dur"] for e in inside if e["cat"] == "store")
            assert np.allclose(durs, np.sort(rows["issue_end(us)"] - rows["issue_start(us)"]), atol=1e-6)
            nbytes = rows["bytes_remote"].sum()
        else:
            starts = sorted(e["ts"] - run["ts"] for e in inside if e["cat"] == "issue")
            assert np.allclose(starts, np.sort(rows["start(us)"] - rows["start(us)"].min()), atol=1e-6)
            nbytes = rows["bytes_per_producer"].sum()
        total = [e["args"]["MiB"] for e in doc["traceEvents"] if e["ph"] == "C" and e["name"] == "issued (MiB)"
                 and run["ts"] - 1e-6 <= e["ts"] <= run["ts"] + run["dur"] + 1e-6]
        assert math.isclose(total[-1] if total else 0.0, nbytes / 2**20, rel_tol=1e-9, abs_tol=1e-12)
        assert total == sorted(total)                        # a running total never falls


def test_a_simulated_replay(tmp_path):
    records = tmp_path / "replay.parquet"
    assert main(["replay", "moe", "-p", "paper-b200", "--config", "DiT-MoE/w8a8/skewed/S", "--schedule",
                 "interleaved", "--out", str(records)]) == 0
    frame, meta = load_records(records, "tile")
    doc = write_and_load(records, tmp_path / "trace.json")
    counts = check_every_event(doc, frame, "tile")
    check_spans_match_the_records(doc, frame, "tile")
    assert counts["C"] > 0 and counts["drain"] == 1
    drain = next(e for e in doc["traceEvents"] if e.get("cat") == "drain")
    run = next(e for e in doc["traceEvents"] if e.get("cat") == "run")
    assert math.isclose(drain["ts"] + drain["dur"] - run["ts"],
                        meta["summary"]["drain_end_us"] - frame["mainloop_start(us)"].min(), rel_tol=1e-9)


def test_simulated_bursts_two_experiments_one_after_the_other(tmp_path):
    p = load_platform("paper-b200")
    frames = [simulate_bursts(p, BurstConfig(K, 32768, G, bursts=6)).bursts for K, G in ((8, 0.0), (4, 2.0))]
    frame = pd.concat(frames, ignore_index=True)
    records = save_records(tmp_path / "bursts.parquet", "burst", frame, {})
    doc = write_and_load(records, tmp_path / "trace.json")
    counts = check_every_event(doc, frame, "burst")
    check_spans_match_the_records(doc, frame, "burst")
    assert counts["run"] == 2 and counts["drain"] == 0
    first, second = [e for e in doc["traceEvents"] if e.get("cat") == "run"]
    assert second["ts"] > first["ts"] + first["dur"]        # runs never overlap


@pytest.mark.parametrize("path, select", [
    ("data/attention/attention-tile.parquet", ["--select", "M=8192"]),
    ("data/moe/moe-tile-small.parquet", ["--select", "schedule=interleaved"]),
    ("data/calibration/h200-local/bursts.parquet", ["--select", "producers=16", "--select", "phase=rate"]),
])
def test_slices_of_committed_measured_records(tmp_path, path, select):
    frame, meta = load_records(ROOT / path)
    for pair in select[1::2]:
        key, value = pair.split("=")
        frame = frame[frame[key].astype(str) == value]
    assert 0 < len(frame) < 20000 and (frame["source"] == "hw").all()
    doc = write_and_load(ROOT / path, tmp_path / "trace.json", *select)
    counts = check_every_event(doc, frame, meta["kind"])
    check_spans_match_the_records(doc, frame, meta["kind"])
    assert counts["run"] >= 2 and counts["drain"] == 0


def _bad(argv, capsys, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and needle in err, err


def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "t.json"
    _bad(["trace", str(tmp_path / "none.parquet"), "--out", str(out)], capsys, "does not exist")
    kernel = ROOT / "data" / "moe" / "moe-kernel.parquet"
    _bad(["trace", str(kernel), "--out", str(out)], capsys, "kind(='kernel') must be tile or burst")
    tiles = ROOT / "data" / "moe" / "moe-tile-small.parquet"
    _bad(["trace", str(tiles), "--out", str(out), "--select", "schedule=sideways"], capsys, "matches no row")
    _bad(["trace", str(tiles), "--out", str(out), "--select", "colour=red"], capsys, "names no column")
    _bad(["trace", str(tiles), "--out", str(tmp_path / "t.txt")], capsys, "must end in .json")
    frame, _ = load_records(tiles)
    empty = save_records(tmp_path / "empty.parquet", "tile", frame.iloc[:0], {})
    _bad(["trace", str(empty), "--out", str(out)], capsys, "no rows")
    broken = frame.iloc[:10].copy()
    broken.loc[broken.index[3], "issue_end(us)"] = np.nan
    broken = save_records(tmp_path / "broken.parquet", "tile", broken, {})
    _bad(["trace", str(broken), "--out", str(out)], capsys, "row 3: issue_start(us) .. issue_end(us)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.parquet", "empty.parquet"]


def test_an_existing_trace_is_replaced_only_with_overwrite(tmp_path, capsys):
    tiles = ROOT / "data" / "moe" / "moe-tile-small.parquet"
    out = tmp_path / "t.json"
    out.write_text("keep me")
    _bad(["trace", str(tiles), "--out", str(out), "--select", "schedule=interleaved"], capsys, "already exists")
    assert out.read_text() == "keep me"
    assert main(["trace", str(tiles), "--out", str(out), "--select", "schedule=interleaved", "--overwrite",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["events"] == len(json.loads(out.read_text())["traceEvents"]) and summary["bytes"] == out.stat().st_size
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]
