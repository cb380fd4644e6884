"""Record column spelling (``xstage.records.spelling``): every declared column is ``name(unit)``; files
of schema version 1 and 2, which spelt half their columns ``name_unit``, load under today's names
with the same figures; a file or frame that breaks the rule is refused in one line naming the column."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from xstage.cli import main
from xstage.errors import InputError
from xstage.records import KINDS, META_KEY, SCHEMA_VERSION, TABLES, declared_columns, load_records, save_records
from xstage.records.spelling import RENAMED, column_name, follows_rule, json_key, misspelt

ROOT = Path(__file__).resolve().parents[2]


def _declared():
    pairs = [(k, name, unit) for k in KINDS for name, unit in declared_columns(k)]
    return pairs + [(f"summary ({t})", name, unit) for t, cols in TABLES.items() for name, unit in cols]


@pytest.mark.parametrize("where, name, unit", _declared(), ids=lambda x: str(x))
def test_every_declared_column_spells_its_unit_name_paren_unit(where, name, unit):
    assert follows_rule(name, unit), f"{where}: {name!r} (unit {unit!r})"


@pytest.mark.parametrize("name, unit", [("gap_us", "us"), ("T_iss_us", "us"), ("volume_bytes", "bytes"),
                                        ("gap(ms)", "us"), ("gap(us)", "bytes"), ("GBps", "GBps"),
                                        ("gap", "us"), ("trials(us)", "count")])
def test_the_rule_refuses_the_other_spellings(name, unit):
    assert not follows_rule(name, unit)


def test_json_keys_and_record_columns_are_the_same_name_and_unit_token():
    for key, col in [("T_iss_us", "T_iss(us)"), ("volume_bytes", "volume(bytes)"), ("kernel_GBps", "kernel(GBps)"),
                     ("measured_l1_epilogue_us", "measured_l1_epilogue(us)"), ("V_MiB", "V(MiB)")]:
        assert column_name(key) == col and json_key(col) == key
    for same in ("bytes_per_producer", "bytes_remote", "trials", "speedup", "rel_err_T_iss"):
        assert column_name(same) == same == json_key(same) and misspelt(same) is None


def _committed():
    out = subprocess.run(["git", "ls-files", "data"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / p for p in out.split() if p.endswith(".parquet")]


@pytest.mark.parametrize("path", _committed(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_file_loads_under_the_new_names_with_the_same_figures(path):
    """The committed files are schema 1 and 2 (never rewritten) or 3 (written under the rule): on load every
    column follows the rule, and each holds exactly the values of its old-named column."""
    raw = pq.read_table(path).to_pandas()
    kind = "point" if path.name == "points.parquet" else None   # version 1 stored points as summaries
    frame, meta = load_records(path, kind)
    assert meta["schema_version"] in (1, 2, 3)
    assert [c for c in frame.columns if misspelt(c)] == []
    assert len(frame.columns) == len(raw.columns) and len(frame) == len(raw)
    renamed = RENAMED.get(meta["kind"], {})
    for old, new in zip(raw.columns, frame.columns):
        assert new == renamed.get(old, column_name(old))
        pd.testing.assert_series_equal(frame[new], raw[old], check_names=False)


def test_the_old_names_the_issue_lists_map_to_name_paren_unit():
    points, _ = load_records(ROOT / "data/nvshmem-w1/torch/points.parquet", "point")   # schema 2
    assert {"volume(bytes)", "gap(us)", "gap_measured(us)", "T_iss(us)", "period(us)", "fence(us)",
            "T_iss_producer(us)", "kernel(GBps)"} <= set(points.columns)
    old_points, _ = load_records(ROOT / "data/calibration/h200-local/points.parquet", "point")   # schema 1 summary
    assert {"T_iss(us)", "period(us)"} <= set(old_points.columns) and "T_iss_us" not in old_points
    moe, _ = load_records(ROOT / "data/moe/run-d815b94/moe-kernel.parquet", "kernel")
    assert {"lead_tune(us)", "local(bytes)", "remote(bytes)", "combine_copy(GBps)", "measured_l1(us)",
            "measured_l1_epilogue(us)", "measured_l2(us)", "measured_l2_epilogue(us)", "compute(TFLOPs)"} <= set(moe)
    fa4, _ = load_records(ROOT / "data/attention-fa4/run1/attention-fa4-kernel.parquet", "kernel")
    copy, _ = load_records(ROOT / "data/calibration/h200-local/copy.parquet", "kernel")
    assert {"stagger(us)", "copy(GBps)"} <= set(fa4) and {"copy(GBps)", "volume(bytes)"} <= set(copy)


def _write_by_hand(path, frame, version, kind="point"):
    block = {"kind": kind, "schema_version": version, "config": {"by": "hand"}}
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(
        {META_KEY: json.dumps(block).encode()}), path)
    return path


def _old_points():
    return pd.DataFrame({"phase": ["rate", "isolated"], "target": "peer", "mode": ["periodic", "isolated"],
                         "gap_kind": "spin", "producers": [4, 4], "bytes_per_producer": [4096, 8192],
                         "volume_bytes": [16384, 32768], "gap_us": [0.0, 5.0], "gap_measured_us": [0.1, np.nan],
                         "T_iss_us": [1.25, 2.5], "period_us": [1.5, np.nan], "trials": [3, 3],
                         "kernel_GBps": [10.0, 11.0]})


def test_a_schema_2_file_built_here_loads_with_new_names_and_saves_as_schema_3(tmp_path):
    old = _write_by_hand(tmp_path / "old.parquet", _old_points(), 2)
    frame, meta = load_records(old, "point")
    assert list(frame.columns) == ["phase", "target", "mode", "gap_kind", "producers", "bytes_per_producer",
                                   "volume(bytes)", "gap(us)", "gap_measured(us)", "T_iss(us)", "period(us)",
                                   "trials", "kernel(GBps)"]
    assert frame["T_iss(us)"].tolist() == [1.25, 2.5] and meta["config"] == {"by": "hand"}
    new = save_records(tmp_path / "new.parquet", "point", frame, meta)
    assert json.loads(pq.read_schema(new).metadata[META_KEY])["schema_version"] == SCHEMA_VERSION == 3
    again, _ = load_records(new, "point")
    pd.testing.assert_frame_equal(again, frame)


def test_a_dashboard_frame_keeps_its_own_columns_in_any_version(tmp_path):
    sweep = pd.DataFrame({"config": ["a"], "wave_us": [2.0], "int_us": [1.0]})
    path = save_records(tmp_path / "f.parquet", "summary", sweep, {}, table="frame")
    for version in (2, 3):
        table = pq.read_table(path)
        block = {**json.loads(table.schema.metadata[META_KEY]), "schema_version": version}
        pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(block).encode()}), path)
        assert list(load_records(path, "summary")[0].columns) == ["config", "wave_us", "int_us"]


def _one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_save_refuses_a_column_spelt_the_json_key_way(tmp_path):
    frame, _ = load_records(_write_by_hand(tmp_path / "old.parquet", _old_points(), 2), "point")
    with pytest.raises(InputError) as err:
        save_records(tmp_path / "x.parquet", "point", frame.assign(fence_us=1.0), {})
    assert _one_line(err) == (f"{tmp_path / 'x.parquet'}: column(='fence_us') spells its unit the JSON-key way; "
                              "a record column is name(unit) (write 'fence(us)')")
    with pytest.raises(InputError, match=r"column\(='wait\(ms\)'\) has unit 'ms'"):
        save_records(tmp_path / "x.parquet", "point", frame.assign(**{"wait(ms)": 1.0}), {})
    assert not (tmp_path / "x.parquet").exists()


def test_load_refuses_old_names_in_a_new_file_and_clashing_names_in_an_old_one(tmp_path):
    v3 = _write_by_hand(tmp_path / "v3.parquet", _old_points(), 3)
    with pytest.raises(InputError) as err:
        load_records(v3, "point")
    assert _one_line(err).startswith(f"{v3}: point columns(=['volume(bytes)', 'gap(us)', ")   # declared ones missing
    both = _write_by_hand(tmp_path / "both.parquet", _old_points().assign(**{"T_iss(us)": 1.0}), 2)
    with pytest.raises(InputError) as err:
        load_records(both, "point")
    assert _one_line(err) == (f"{both}: columns(=['T_iss_us', 'T_iss(us)']) all map to 'T_iss(us)' in schema "
                              "version 3; keep one")
    extra = _write_by_hand(tmp_path / "extra.parquet", _old_points().assign(**{"wait(ms)": 1.0}), 2)
    with pytest.raises(InputError, match=r"extra\.parquet: column\(='wait\(ms\)'\) has unit 'ms'"):
        load_records(extra, "point")


def test_the_cli_refuses_a_mismatched_file_in_one_line(tmp_path, capsys):
    both = _write_by_hand(tmp_path / "both.parquet", _old_points().assign(**{"T_iss(us)": 1.0}), 2)
    assert main(["compare", str(both)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xstage: error: ") and "T_iss_us" in err[0]


def test_a_sweep_saved_as_records_reads_back_under_its_json_keys(tmp_path, capsys):
    """``xstage sweep moe --out`` writes ``wave(us)``; the compare layer reads it back as the sweep's own
    JSON-keyed frame (``wave_us``), the same columns and figures as a sweep run in memory."""
    from xstage.compare.measured import moe_sweep_records
    from xstage.sim.platform import load_platform
    from xstage.sim.sweep import sweep

    name = "DiT-MoE/w8a8/balanced/M"
    out = tmp_path / "sweeps" / "moe.parquet"
    assert main(["sweep", "moe", "-p", "paper-b200", "--configs", name, "--jobs", "1", "--no-progress",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    on_disk, _ = load_records(out, "summary", table="moe_sweep")
    assert {"wave(us)", "int(us)"} <= set(on_disk) and not [c for c in on_disk if misspelt(c)]
    back = moe_sweep_records(tmp_path, "paper-b200").drop(columns="record_file")
    frame = sweep("moe", load_platform("paper-b200"), jobs=1, configs=[name])
    assert list(back.columns) == list(frame.columns) and "wave_wall_s" in frame         # wall clock: seconds
    wall = [c for c in frame.columns if c.endswith("_wall_s")]
    pd.testing.assert_frame_equal(back.drop(columns=wall).reset_index(drop=True),
                                  frame.drop(columns=wall).reset_index(drop=True))
