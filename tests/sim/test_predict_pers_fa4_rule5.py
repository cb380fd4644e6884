"""The fifth rule of ``benchmarks/predict_pers_fa4.py`` (fourth rule's structure, drift measured by the FA4 tile
log), run on pers6 as a stand-in for pers8: the drift is the tile-log statistic, the verdict rows are the
predictor's answers under it, an existing output is refused (exit 2), and a run missing kernels is handled."""

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from xstage.cli.exits import call
from xstage.paths import data_dir

from .pers_fa4_checks import check_verdict_rows

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "predict_pers_fa4.py"


def _script():
    spec = importlib.util.spec_from_file_location("predict_pers_fa4", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def pers6_record(tmp_path_factory):
    out = tmp_path_factory.mktemp("rule5") / "pers6.json"
    mod = _script()
    assert call(lambda: mod.main(["--runs", "attention-fa4/pers6", "--verdict", "fa4_law_drift_measured",
                                  "--out", str(out)])) == 0
    return mod, out, json.loads(out.read_text())


def _statistic():
    summary = json.loads((data_dir() / "attention-fa4/pers7-tilelog/tile-log-summary.json").read_text())
    vals = [r["drift.range_per_wave"] for r in summary["rows"] if r["mode"] == "fa"]
    assert len(vals) == 12    # drain, stagger, staggerll, staggersplitw at 16K, 32K, 64K
    return float(np.median(vals))


def test_drift_is_the_tile_log_statistic(pers6_record):
    mod, _, rec = pers6_record
    s5 = _statistic()
    assert 0.012 < s5 < 0.027 and rec["program_spread_measured"] == pytest.approx(s5, rel=1e-12)
    assert rec["program_spread_measured_from"] == mod.TILE_LOG
    assert mod.measured_drift({"rows": [{"mode": "fa", "drift.range_per_wave": 0.01},
                                        {"mode": "fused", "drift.range_per_wave": 0.5},
                                        {"mode": "fa", "drift.range_per_wave": 0.03}]}) == pytest.approx(0.02)


def test_record_shape_and_verdict_rows(pers6_record):
    _, _, rec = pers6_record
    assert rec["verdict_key"] == "fa4_law_drift_measured" and rec["runs"] == ["attention-fa4/pers6"]
    assert rec["skipped"] == [] and "fifth rule" in rec["rule"]
    assert {r["kernel"] for r in rec["rows"]} == {"staggerll", "staggerll1", "staggersplit", "staggersplitw"}
    s5 = rec["program_spread_measured"]
    assert all(r["program_spread_measured"] == (s5 if r["kind"] == "persistent" else 0.0) for r in rec["rows"])
    check_verdict_rows(rec, "fa4_law_drift_measured", rec["rows"],
                       lambda r: {**r["kw_split"], "program_spread": s5, "fa_program_spread": s5})
    g = rec["summary"]["all persistent"]["fa4_law_drift_measured"]
    assert g["n"] == len(rec["rows"]) and g["within"] == sum(r["fa4_law_drift_measured_within"] for r in rec["rows"])


def test_existing_output_is_refused(pers6_record, capsys):
    mod, out, _ = pers6_record
    before = out.read_bytes()
    assert call(lambda: mod.main(["--runs", "attention-fa4/pers6", "--out", str(out)]), "p") == 2
    assert "--out" in capsys.readouterr().err and out.read_bytes() == before


def test_missing_kernels_are_skipped(tmp_path, monkeypatch):
    src = data_dir()
    for rel in ("predictions/fa-heldout-v2-h200-pcie-host.json", "attention-fa4/pers7-tilelog/tile-log-summary.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, tmp_path / rel)
    table = pq.read_table(src / "attention-fa4/pers6/attention-fa4-kernel.parquet")
    gone = {"pfa4_staggersplit", "fused_vmm_pers_staggersplit", "pfa4_staggerll1"}   # a kernel; an FA-only row
    keep = pa.array([str(v) not in gone for v in table["variant"].to_pylist()])
    (tmp_path / "attention-fa4/pers8").mkdir()
    pq.write_table(table.filter(keep), tmp_path / "attention-fa4/pers8/attention-fa4-kernel.parquet")
    monkeypatch.setenv("XSTAGE_DATA", str(tmp_path))
    out = tmp_path / "pers8.json"
    mod = _script()
    assert call(lambda: mod.main(["--runs", "attention-fa4/pers8", "--verdict", "fa4_law_drift_measured",
                                  "--out", str(out)])) == 0
    rec = json.loads(out.read_text())
    assert {r["kernel"] for r in rec["rows"]} == {"staggerll", "staggersplitw"}
    assert rec["skipped"] and all("fused_vmm_pers_staggerll1" in s for s in rec["skipped"])
