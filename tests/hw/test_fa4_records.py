"""FA4 records (hw/attention/fa4_records.py) and their summary (compare/attention_fa4.py) on hand-made rows, and
the bench's argument checks."""

import pytest

from xstage.errors import InputError
from xstage.compare import attention_fa4 as S
from xstage.hw.attention import fa4_records as R
from xstage.sim.workloads.receive_layout import ReceiveLayout

LAY = ReceiveLayout(16384, 3, 128, 8, 0)


def rows():
    t = {"fa4": 600.0, "cudnn": 660.0, "ce": 300.0, "serial_fa4": 900.0, "serial_cudnn": 960.0, "pipelined": 700.0,
         "pipelined_g2": 760.0, "fused_allhost": 680.0, "fused_perchunk": 650.0, "fused_hbm": 610.0}
    paired = {"serial_fa4": 300.0, "fused_allhost": 75.0, "fused_perchunk": 60.0, "fused_hbm": 5.0, "pipelined": 100.0}
    return [R.kernel_row(LAY, n, [v - 1, v, v + 1], **({"paired_minus_fa(us)": paired[n]} if n in paired else {}))
            for n, v in t.items()]


def test_kernel_row_has_the_standard_columns():
    from xstage.records import COLUMNS

    r = R.kernel_row(LAY, "fa4", [1.0, 3.0, 2.0])
    assert set(COLUMNS["kernel"]) <= set(r) and r["time(us)"] == 2.0 and r["trials"] == 3
    assert r["platform"] == "h200-pcie-host" and r["experiment"] == "attention-fa4"
    with pytest.raises(InputError):
        R.kernel_row(LAY, "fa4", [])


def test_summary_judges_fused_against_the_best_unfused():
    s = S.summarise(rows())[0]
    assert s["fa_vs_sdpa"] == pytest.approx(1.1)
    assert s["serial_best_is"] == "serial_fa4" and s["serial_best_us"] == 900.0
    assert s["best_unfused_is"] == "pipelined" and s["best_unfused_us"] == 700.0
    assert s["best_fused_is"] == "fused_perchunk"  # fused_hbm sends nothing: never the best fused
    f = s["fused"]["fused_perchunk"]
    assert f["hiding_ratio_paired"] == pytest.approx(0.8) and f["e_res_paired_us"] == 60.0
    assert f["speedup_vs_serial_best"] == pytest.approx(900 / 650) and f["speedup_vs_best_unfused"] == pytest.approx(700 / 650)
    met = S.targets(s)
    assert met["fa_vs_sdpa_ge_1"] is True and met["fused_within_3pct"] is False and met["beats_serial_best"] is True
    assert "fused_perchunk" in S.table([s])


def test_summary_file_is_what_the_bench_writes_beside_its_records():
    doc = S.summary_file(rows())
    assert doc["targets"] == S.TARGETS and [s["M"] for s in doc["per_M"]] == [16384]
    assert doc["met"] == [S.targets(doc["per_M"][0])]
    assert S.EXPERIMENT == R.EXPERIMENT == rows()[0]["experiment"]   # compare reads what the bench writes


def test_bench_rejects_bad_arguments_in_one_line(tmp_path):
    from xstage.cli.bench_fa4 import parse_args

    out = str(tmp_path / "x")
    for argv, field in ((["--seq-lens", "1000"], "seq_len"), (["--trials", "5"], "--trials"),
                        (["--seq-lens", "8k"], "--seq-lens"), (["--seq-lens", ""], "--seq-lens"),
                        (["--pairs", "x"], "--pairs"), (["--tile-mn", "128"], "--tile-mn"),
                        (["--budget-s", "0"], "--budget-s")):
        with pytest.raises(InputError) as err:
            parse_args(["--out", out, *argv])
        assert str(err.value).startswith(field)
    args = parse_args(["--out", out, "--tile-mn", "", "--seq-lens", "8192,16384"])
    assert args.seq_lens == [8192, 16384] and args.tile_mn == []


def test_bench_refuses_to_overwrite_records_before_any_gpu_work(tmp_path):
    from xstage.cli.bench_fa4 import main

    (tmp_path / "attention-fa4-kernel.parquet").write_text("measured")
    assert main(["--out", str(tmp_path)]) == 2
    assert main(["--out", str(tmp_path), "--tag", "persistent", "--seq-lens", "1000"]) == 2  # the shape, first
    assert (tmp_path / "attention-fa4-kernel.parquet").read_text() == "measured"


def test_bench_main_exits_2_on_bad_input(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "xstage.hw.attention.fa4_bench", "--out", str(tmp_path),
                        "--seq-lens", "1000"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "seq_len" in p.stderr and "Traceback" not in p.stderr


def test_bench_writes_the_summary_it_is_handed_beside_its_records(tmp_path):
    import json

    from xstage.hw.attention.fa4_bench import save
    from xstage.records import load_records

    paths = save(tmp_path, "", rows(), [{"variant": "fa4", "ok": True}], S.summary_file(rows()), {"args": {}})
    assert [p.name for p in paths] == ["attention-fa4-kernel.parquet", "attention-fa4-checks.json",
                                       "attention-fa4-summary.json"]
    kernel, _ = load_records(tmp_path / "attention-fa4-kernel.parquet", "kernel")
    assert len(kernel) == len(rows())
    summary = json.loads((tmp_path / "attention-fa4-summary.json").read_text())
    assert summary["targets"] == S.TARGETS and summary["per_M"][0]["best_fused_is"] == "fused_perchunk"
    (tmp_path / "attention-fa4-summary.json").unlink()
    assert [p.name for p in save(tmp_path, "x", rows(), [], None, {})] == ["attention-fa4-x-kernel.parquet",
                                                                          "attention-fa4-x-checks.json"]
    assert not (tmp_path / "attention-fa4-x-summary.json").exists()
