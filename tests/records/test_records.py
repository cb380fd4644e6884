"""Record schemas: every committed record file loads with its kind and declared columns; save and
load refuse a wrong kind, a wrong schema version and missing or non-numeric columns, naming the
file and the field; metadata never relabels a file."""

import json
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from xstage.errors import InputError
from xstage.records import (COLUMNS, KINDS, META_KEY, SCHEMA_VERSION, TABLES, declared_columns, declares,
                            load_records, read_meta, save_records)

ROOT = Path(__file__).resolve().parents[2]
# what each committed file name holds: (kind asked for, summary table)
EXPECTED = {"bursts.parquet": ("burst", None), "points.parquet": ("point", None),
            "points-runs.parquet": ("point", None),   # every run of `xstage calibrate --repeat N`
            "check.parquet": ("summary", "calibration_check"), "copy.parquet": ("kernel", None),
            "attention-kernel.parquet": ("kernel", None), "moe-kernel.parquet": ("kernel", None),
            "attention-tile.parquet": ("tile", None), "moe-tile-small.parquet": ("tile", None),
            "moe-tile.parquet": ("tile", None), "attention-fa4-kernel.parquet": ("kernel", None), "attention-fa4-persistent-kernel.parquet": ("kernel", None),
            # a tuner's re-measurement at its own picks, kept out of `xstage results moe` by its name
            "picked-moe-kernel.parquet": ("kernel", None), "picked-moe-tile-small.parquet": ("tile", None),
            # the in-pair run's launches, per-wave summaries and raw tiles (benchmarks/gpu/fa_split_inpair.py)
            "inpair-launch.parquet": ("summary", "frame"), "inpair-wave.parquet": ("summary", "frame"),
            "inpair-tile.parquet": ("summary", "frame"),
            # rule 19's and rule 20's timed pairs and blocks (benchmarks/gpu/fa_rule19.py, fa_rule20.py)
            "rule19-pairs.parquet": ("summary", "frame"), "rule20-pairs.parquet": ("summary", "frame"),
            "rule20-blocks.parquet": ("summary", "frame")}


def committed_records():
    out = subprocess.run(["git", "ls-files", "data"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    paths = [ROOT / p for p in out.split()]
    # Parquet files, and CSV files with a .meta.json beside them (data/attention/smi-trace.csv is a log)
    return [p for p in paths if p.suffix == ".parquet" or (p.suffix == ".csv" and p.with_suffix(".meta.json").exists())]


def test_the_committed_data_has_record_files():
    names = {p.name for p in committed_records()}
    assert len(committed_records()) >= 20 and names <= set(EXPECTED)


@pytest.mark.parametrize("path", committed_records(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_record_file_loads_with_its_kind_and_columns(path):
    kind, table = EXPECTED[path.name]
    frame, meta = load_records(path, kind, table=table)
    assert meta["kind"] == kind and len(frame) > 0
    assert set(COLUMNS[kind]) <= set(frame.columns)
    if table:
        assert meta["table"] == table and {c for c, _ in TABLES[table]} <= set(frame.columns)
    assert declares(path, kind)
    assert not declares(path, "tile" if kind != "tile" else "burst")


def test_every_kind_declares_units_for_its_columns():
    for kind, module in KINDS.items():
        assert module.KIND == kind
        for name, unit in declared_columns(kind):
            assert isinstance(name, str) and unit in ("", "us", "bytes", "count", "ratio")
    from xstage.records.summary import FREE_FORM
    for table in TABLES:
        assert bool(declared_columns("summary", table)) == (table not in FREE_FORM), table
    # (the spelling of every declared column: tests/records/test_spelling.py)


def _bursts():
    row = {"source": "sim", "platform": "p", "target": "peer", "mode": "periodic", "producers": 2,
           "bytes_per_producer": 4096, "gap(us)": 0.0, "producer": 0, "burst": 0, "start(us)": 0.0,
           "issue(us)": 1.0, "period(us)": 1.5}
    return pd.DataFrame([row, {**row, "producer": 1}])


def test_metadata_carrying_a_kind_never_relabels_a_file(tmp_path):
    path = save_records(tmp_path / "b.parquet", "burst", _bursts(),
                        {"kind": "summary", "schema_version": 1, "table": "moe_sweep", "config": {"x": 1}})
    frame, meta = load_records(path, "burst")
    assert meta["kind"] == "burst" and meta["schema_version"] == SCHEMA_VERSION and "table" not in meta
    assert meta["config"] == {"x": 1} and len(frame) == 2
    # the refit path: meta loaded from one file, saved under another kind
    again = save_records(tmp_path / "c.csv", "burst", frame, meta)
    assert json.loads(again.with_suffix(".meta.json").read_text())["kind"] == "burst"


def test_load_refuses_a_wrong_kind_naming_the_file(tmp_path):
    path = save_records(tmp_path / "b.parquet", "burst", _bursts(), {})
    with pytest.raises(InputError, match=r"b\.parquet: kind\(='burst'\) must be 'tile'"):
        load_records(path, "tile")


def _relabel(path, **changes):
    table = pq.read_table(path)
    block = {**json.loads(table.schema.metadata[META_KEY]), **changes}
    pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(block).encode()}), path)


@pytest.mark.parametrize("changes, field", [({"schema_version": 7}, "schema_version(=7)"),
                                            ({"schema_version": None}, "schema_version(=None)"),
                                            ({"kind": "gemm"}, "kind(='gemm')")])
def test_load_refuses_a_bad_block_naming_the_file_and_the_field(tmp_path, changes, field):
    path = save_records(tmp_path / "b.parquet", "burst", _bursts(), {})
    _relabel(path, **changes)
    with pytest.raises(InputError) as err:
        load_records(path)
    assert str(err.value).startswith(f"{path}: {field}")


def test_save_and_load_refuse_missing_and_non_numeric_columns(tmp_path):
    with pytest.raises(InputError, match=r"x\.parquet: burst columns\(=\['issue\(us\)'\]\) are missing"):
        save_records(tmp_path / "x.parquet", "burst", _bursts().drop(columns="issue(us)"), {})
    assert not (tmp_path / "x.parquet").exists()
    with pytest.raises(InputError, match=r"column start\(us\).*must be numeric \(unit us\)"):
        save_records(tmp_path / "x.parquet", "burst", _bursts().assign(**{"start(us)": "soon"}), {})
    # a file written by hand without a declared column is refused on load
    path = tmp_path / "y.parquet"
    pq.write_table(pa.Table.from_pandas(_bursts().drop(columns="period(us)")).replace_schema_metadata(
        {META_KEY: json.dumps({"kind": "burst", "schema_version": SCHEMA_VERSION}).encode()}), path)
    with pytest.raises(InputError, match=r"y\.parquet: burst columns\(=\['period\(us\)'\]\)"):
        load_records(path)


def _sweep_rows():
    return pd.DataFrame([{"config": "a", "model": "m", "precision": "bf16", "routing": "skewed", "setting": "S",
                          "rows": 4, "lead_rows": 1, "num_sms": 8, "staging_slots": 2, "tiles": 10,
                          "wave(us)": 2.0, "int(us)": 1.0, "speedup": 2.0}])


def test_a_summary_names_its_table_and_carries_its_columns(tmp_path):
    with pytest.raises(InputError, match="summary table"):
        save_records(tmp_path / "s.parquet", "summary", _sweep_rows(), {})
    with pytest.raises(InputError, match=r"summary \(fa_sweep\) columns"):
        save_records(tmp_path / "s.parquet", "summary", _sweep_rows(), {}, table="fa_sweep")
    with pytest.raises(InputError, match="applies to summary records only"):
        save_records(tmp_path / "s.parquet", "burst", _bursts(), {}, table="moe_sweep")
    path = save_records(tmp_path / "s.parquet", "summary", _sweep_rows(), {}, table="moe_sweep")
    assert load_records(path, "summary")[1]["table"] == "moe_sweep"
    with pytest.raises(InputError, match=r"s\.parquet: table\(='moe_sweep'\) must be 'fa_sweep'"):
        load_records(path, "summary", table="fa_sweep")
    _relabel(path, table=None)
    with pytest.raises(InputError, match=r"s\.parquet: table\(=None\)"):
        load_records(path)


def test_a_version_1_summary_is_read_as_points_only_when_asked(tmp_path):
    points = ROOT / "data" / "calibration" / "h200-local" / "points.parquet"
    assert read_meta(points)["kind"] == "summary" and read_meta(points)["schema_version"] == 1
    assert load_records(points)[1]["kind"] == "summary"        # as written
    assert load_records(points, "point")[1]["kind"] == "point"
    check = ROOT / "data" / "calibration" / "h200-local" / "check.parquet"
    with pytest.raises(InputError, match=r"check\.parquet: point columns"):
        load_records(check, "point")
    # a version 3 summary is never a point
    path = save_records(tmp_path / "s.parquet", "summary", _sweep_rows(), {}, table="moe_sweep")
    assert not declares(path, "point")


def test_missing_and_unreadable_files_are_one_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_records(tmp_path / "none.parquet")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="not a readable record file"):
        load_records(tmp_path / "bad.parquet")
    assert not declares(tmp_path / "none.parquet", "burst")


def test_a_refit_keeps_every_record_kind_and_can_run_twice(tmp_path):
    import shutil

    from xstage.hw.calib.calibrate import refit

    out = tmp_path / "h200-pcie-host"
    shutil.copytree(ROOT / "data" / "calibration" / "h200-pcie-host", out)
    for _ in range(2):
        refit(out, name="h200-pcie-host", overwrite=True)
        for name in ("bursts.parquet", "points.parquet", "check.parquet", "copy.parquet"):
            kind, table = EXPECTED[name]
            meta = read_meta(out / name)
            assert (meta["kind"], meta.get("table"), meta["schema_version"]) == (kind, table, SCHEMA_VERSION)


def test_gpu_provenance_names_the_physical_gpu(monkeypatch):
    """gpu_info reads the driver, clocks, PCIe link and the GPU's UUID from nvidia-smi's first line (lent machines
    change between sessions, and per-GPU offsets showed up across sessions: the UUID says whether it was one GPU)."""
    import sys
    import types

    import xstage.provenance as prov
    props = types.SimpleNamespace(name="NVIDIA H200", multi_processor_count=132, total_memory=140 * 2**30)
    cuda = types.SimpleNamespace(is_available=lambda: True, get_device_properties=lambda i: props,
                                 device_count=lambda: 1)
    fake_torch = types.SimpleNamespace(cuda=cuda, version=types.SimpleNamespace(cuda="13.0"))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)      # no GPU and no torch needed for the parse
    line = "570.1, 1980 MHz, 1980 MHz, 5, 16, GPU-0a1b2c3d-0000-1111-2222-333344445555\n"
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout=line))
    info = prov.gpu_info()
    assert info["gpu"] == "NVIDIA H200" and info["sm_count"] == 132 and info["driver"] == "570.1"
    assert info["gpu_uuid"] == "GPU-0a1b2c3d-0000-1111-2222-333344445555" and info["pcie_width"] == "16"
