"""``benchmarks/calib_perk18.py`` (session 18, post hoc, exploratory, decides nothing): a per-K capacity on lockq.
The per-K platform with every Q(K) at the line's value judges exactly as lockq (fresh14, every seed); the committed
record's summary is what its rows give, and its sanity checks all hold; an existing ``--json`` is refused."""
import json
import tempfile
from pathlib import Path

import pytest

from .bench_scripts import load_script

pk18 = load_script("calib_perk18")


def test_the_per_k_platform_at_the_line_judges_exactly_as_lockq_on_fresh14():
    from xstage.records import load_records
    with tempfile.TemporaryDirectory() as d:
        points, _ = load_records(pk18.folder_of("fresh14", Path(d)) / "points.parquet", "point")
    points = points.reset_index(drop=True)
    lockq, _ = pk18.fit_model(points, pk18.LAW, "perk18-test")
    ks = {int(k) for k in points.loc[points["mode"] == "periodic", "producers"]}
    same = pk18.per_k_platform(lockq, {k: lockq.capacity_bytes(k) for k in ks}, points["producers"])
    assert same.sm_outstanding_bytes is None and same.capacity_floor_bytes == lockq.capacity_points[0][1]
    for k in sorted({int(k) for k in points["producers"]}):
        assert same.capacity_bytes(k) == lockq.capacity_bytes(k)
        assert same.queue_options(k) == lockq.queue_options(k)      # the same relaxing floor and rho
    for seed in pk18.SEEDS:
        split = pk18.split_by_rule(points, "bracket", pk18.FRACTION, seed)
        a, b = pk18.judge(lockq, points, split), pk18.judge(same, points, split)
        assert all(a[f"heldout_{k}"] == b[f"heldout_{k}"] for k in pk18.FIGS) and a["misses"] == b["misses"]
    caps = pk18.search_per_k(points, lockq)            # the search: every lockstep K, the line as its first candidate
    assert set(caps) == ks


def test_the_committed_record_reads_back():
    s = json.loads((pk18.EXTRA / "perk18-posthoc.json").read_text())
    assert s["post_hoc"] is True and s["exploratory"] is True
    assert s["summary"] == json.loads(json.dumps(pk18.summary(s["rows"])))
    assert {(r["scan"], r["grid"], r["candidate"]) for r in s["rows"]} == {
        (sc, g, c) for sc in pk18.SCANS for g in pk18.FOLDERS for c in pk18.CANDIDATES}
    assert len(s["rows"]) == len(pk18.SCANS) * len(pk18.FOLDERS) * len(pk18.CANDIDATES) * len(pk18.SEEDS)
    assert set(s["sanity"]) == set(pk18.FOLDERS) and all(v["equal"] for v in s["sanity"].values())
    lockq_in = s["summary"]["insample/lockq"]["seeds_met"]        # lawscan18's lockq row, refitted here
    assert lockq_in == {"fresh14": 3, "fresh13-r3": 5, "fresh13": 5, "fresh12": 5, "fresh11": 5, "fresh10": 5}


def test_an_existing_json_is_one_line_and_exit_2_before_any_fit(tmp_path, capsys):
    taken = tmp_path / "scan.json"
    taken.write_text("{}")
    with pytest.raises(SystemExit) as stop:
        pk18.main(["--json", str(taken)])
    assert stop.value.code == 2 and taken.read_text() == "{}"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "calib_perk18: error: --json" in err[0]
