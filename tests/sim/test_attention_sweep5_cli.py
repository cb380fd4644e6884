"""``benchmarks/gpu/attention_triton_sweep5.py``'s points, interleaved order, and the configurations its recorded
commands measure (CPU, the GPU parts stubbed; the sweep itself runs on a GPU)."""

import importlib.util
import json
import sys
import types
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "benchmarks" / "gpu"


@pytest.fixture(scope="module")
def mod():
    sys.path.insert(0, str(GPU))
    spec = importlib.util.spec_from_file_location("attention_triton_sweep5", GPU / "attention_triton_sweep5.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_points_default_heads_head_dim_and_block_n(mod):
    assert mod.points("32768:3:128:64, 30720:3:64,8192") == [(32768, 3, 128, 64), (30720, 3, 64, 128),
                                                              (8192, 3, 128, 128)]
    for bad in ("32768:3:128:48", "32768:3:128:8", "1:2:3:4:5", "5x", "1:-2"):
        with pytest.raises(SystemExit):
            mod.points(bad)


def test_points_without_block_n_read_as_the_removed_sweep4_read_them(mod):
    # sweep4 (at ad8f0af) parsed "M[:heads[:d]]" to (M, heads, d) with 3 heads and d 128 left out; block_n was 128
    assert mod.points("57344, 65536:3:64,131072:2:64,8192:6") == [(57344, 3, 128, 128), (65536, 3, 64, 128),
                                                                   (131072, 2, 64, 128), (8192, 6, 128, 128)]


def test_every_repeat_runs_every_point_in_a_rotated_order(mod):
    pts = [1, 2, 3, 4, 5]
    orders = [mod.order(pts, r) for r in range(3)]
    assert orders == [[1, 2, 3, 4, 5], [2, 3, 4, 5, 1], [3, 4, 5, 1, 2]]
    assert all(sorted(o) == pts for o in orders)
    assert len({o[0] for o in orders}) == 3                               # no point always first


def test_each_point_is_a_valid_kernel_config(mod):
    from dataclasses import replace

    from xstage.hw.attention.config import AttentionConfig

    base = AttentionConfig(16384, 3, 128, 8, block_n=128, num_stages=3, tma=True, store_cache=".wt",
                           stagger=True, split_tail=True)
    for M, h, d, bn in mod.points("20480:3:128:64,32768:3:128:64,40960:3:128:64,36864,30720:3:64"):
        c = replace(base, seq_len=M, heads=h, head_dim=d, block_n=bn)
        assert c.block_n == bn and c.seq_len // c.block_n == M // bn


@pytest.mark.parametrize("run", ["ad8f0af-heldout4", "b4fb3a7-heldout5"])
def test_the_recorded_command_measures_the_committed_configurations_in_order(mod, run, monkeypatch, tmp_path):
    """The command in a run's records (heldout4's was sweep4's), run here with the GPU parts stubbed, calls
    ``measure`` with the committed rows' kernel configurations, in their order, with their trials and seed 2 + rep;
    it keeps the tile logs of repeat 0 only, as both runs' committed tile records do."""
    folder = ROOT / "data" / "attention-runs" / run
    meta = json.loads(pq.read_schema(folder / "attention-kernel.parquet").metadata[b"xstage"])["config"]
    args = meta["args"]
    argv = ["--out", str(tmp_path / "r"), "--points", args["points"], "--repeats", str(args["repeats"]),
            "--trials", str(args["trials"])] + (["--tile-reps", str(args["tile_reps"])] if "tile_reps" in args else [])
    calls, saved = [], []

    def measure(cfg, trials, seed=2):
        calls.append((cfg.label(), trials, seed))
        rows = [{"variant": "fa", "time(us)": 1.0}, {"variant": "fused_wb", "paired_minus_fa(us)": 0.0}]
        return rows, [pd.DataFrame({"sm": [0, 1, 2]})], [{"ok": True}]

    props = types.SimpleNamespace(name="stub", L2_cache_size=1, multi_processor_count=132)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        cuda=types.SimpleNamespace(get_device_properties=lambda i: props)))
    monkeypatch.setitem(sys.modules, "attention_triton_heldout", types.SimpleNamespace(measure=measure))
    monkeypatch.setattr("xstage.hw.common.timing.gpu_clocks", lambda: "stub")
    monkeypatch.setattr("xstage.records.attention.save_run",
                        lambda out, rows, tiles, checks, meta, overwrite=False: saved.append((tiles, meta)))
    assert mod.main(argv) == 0

    fa = pd.read_parquet(folder / "attention-kernel.parquet").query("variant == 'fa'")
    assert calls == [(c, int(t), 2 + int(r)) for c, t, r in zip(fa["config"], fa["trials"], fa["rep"])]
    tiles, written = saved[-1]
    assert {int(r) for f in tiles for r in f["rep"]} == {0}
    assert set(pd.read_parquet(folder / "attention-tile.parquet", columns=["rep"])["rep"]) == {0}
    assert written["kernel"] == meta["kernel"] and written["args"]["points"] == args["points"]
    assert [list(p)[:3] for p in written["points"]] == [list(p)[:3] for p in meta["points"]]


def test_paired_marks_are_written_per_point_and_only_when_asked(mod, monkeypatch, tmp_path):
    """``--paired-marks`` hands ``measure`` a list for the host times of each variant's paired timing and writes them,
    with each point's configuration and repeat, to ``paired-marks.json``; without it ``measure`` is called as
    before (no ``marks`` argument) and no such file is written."""
    calls = []

    def measure(cfg, trials, seed=2, **kw):
        calls.append(sorted(kw))
        if "marks" in kw:
            kw["marks"] += [{"variant": "fused_wb", "host_start_s": 1.0 + seed, "host_end_s": 1.5 + seed, "pairs": 10}]
        rows = [{"variant": "fa", "time(us)": 1.0}, {"variant": "fused_wb", "paired_minus_fa(us)": 0.0}]
        return rows, [pd.DataFrame({"sm": [0, 1, 2]})], [{"ok": True}]

    props = types.SimpleNamespace(name="stub", L2_cache_size=1, multi_processor_count=132)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(
        cuda=types.SimpleNamespace(get_device_properties=lambda i: props)))
    monkeypatch.setitem(sys.modules, "attention_triton_heldout", types.SimpleNamespace(measure=measure))
    monkeypatch.setattr("xstage.hw.common.timing.gpu_clocks", lambda: "stub")
    monkeypatch.setattr("xstage.records.attention.save_run", lambda *a, **k: None)
    out = tmp_path / "r"
    assert mod.main(["--out", str(out), "--points", "65536:1,47104:6", "--repeats", "2", "--paired-marks"]) == 0
    assert calls == [["marks"]] * 4
    marks = json.loads((out / "paired-marks.json").read_text())["marks"]
    assert [(m["rep"], m["M"], m["heads"], m["head_dim"], m["block_n"]) for m in marks] == [
        (0, 65536, 1, 128, 128), (0, 47104, 6, 128, 128), (1, 47104, 6, 128, 128), (1, 65536, 1, 128, 128)]
    assert [m["host_start_s"] for m in marks] == [3.0, 3.0, 4.0, 4.0]          # seed 2 + rep
    calls.clear()
    out2 = tmp_path / "plain"
    assert mod.main(["--out", str(out2), "--points", "65536:1", "--repeats", "1"]) == 0
    assert calls == [[]] and not (out2 / "paired-marks.json").exists()


def test_the_clock_diagnostics_take_heads_and_head_dim():
    sys.path.insert(0, str(GPU))
    spec = importlib.util.spec_from_file_location("attention_triton_clock", GPU / "attention_triton_clock.py")
    clock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(clock)
    ns = types.SimpleNamespace
    assert clock.points(ns(points=None, seq_lens="36864,53248")) == [(36864, 3, 128), (53248, 3, 128)]
    assert clock.points(ns(points="57344, 65536:3:64,49152:6", seq_lens="1")) == [(57344, 3, 128), (65536, 3, 64),
                                                                                  (49152, 6, 128)]
    for bad in ("1:2:3:4", "5x", "1:-2"):
        with pytest.raises(SystemExit):
            clock.points(ns(points=bad, seq_lens="1"))
