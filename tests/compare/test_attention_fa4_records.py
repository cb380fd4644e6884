"""FA4 runs in ``xstage results attention`` and ``xstage compare``: hand-made FA4 kernel records of two
runs (rep, run1), a persistent-scheduler file that must be left out, and a same-lease Triton folder."""

import json

import pandas as pd
import pytest

from xstage.compare.attention import compare_fa4
from xstage.compare.attention_records import FA4_HEADLINE, fa4_rows, summarize
from xstage.hw.attention import fa4_records as R
from xstage.sim.workloads.receive_layout import ReceiveLayout
from xstage.records import save_records
from xstage.records.attention import kernel_row
from xstage.hw.attention.config import AttentionConfig

LAY = ReceiveLayout(16384, 3, 128, 8, 0)
TIMES = {"fa4": 600.0, "cudnn": 660.0, "ce": 300.0, "serial_fa4": 900.0, "serial_cudnn": 960.0, "pipelined": 700.0,
         "pipelined_g2": 760.0, "fused_allhost": 680.0, "fused_perchunk": 650.0, "fused_hbm": 610.0}
PAIRED = {"serial_fa4": 300.0, "fused_allhost": 75.0, "fused_perchunk": 60.0, "fused_hbm": 5.0, "pipelined": 100.0}


def fa4_frame(scale=1.0, scheduler="single"):
    return pd.DataFrame([R.kernel_row(LAY, n, [v * scale - 1, v * scale, v * scale + 1], scheduler=scheduler,
                                      **({"paired_minus_fa(us)": PAIRED[n]} if n in PAIRED else {}))
                         for n, v in TIMES.items()])


def triton_frame():
    cfg = AttentionConfig(16384, heads=3, head_dim=128, world_size=8)
    t = {"fa": 800.0, "serial": 1050.0, "fused": 640.0, "serial_best": 960.0, "sdpa": 660.0, "a2a": 250.0}
    return pd.DataFrame([kernel_row(cfg, v, [x]) for v, x in t.items()])


@pytest.fixture
def data(tmp_path):
    fa4 = tmp_path / "attention-fa4"
    save_records(fa4 / "rep" / "attention-fa4-kernel.parquet", "kernel", fa4_frame(), {"config": {}})
    save_records(fa4 / "run1" / "attention-fa4-kernel.parquet", "kernel", fa4_frame(1.1), {"config": {}})
    wrong = fa4_frame(0.5, scheduler="persistent")  # the persistent patch: wrong results, never summarised
    save_records(fa4 / "run1" / "attention-fa4-persistent-kernel.parquet", "kernel", wrong, {"config": {}})
    save_records(fa4 / "triton" / "attention-kernel.parquet", "kernel", triton_frame(), {"config": {}})
    return tmp_path


def test_fa4_rows_read_the_targets_off_one_row(data):
    rows = fa4_rows(data / "attention-fa4")
    assert [(r["run"], r["headline"]) for r in rows] == [(FA4_HEADLINE, True), ("run1", False)]
    r = rows[0]
    assert r["fa_core"] == "fa4" and r["platform"] == "h200-pcie-host" and r["world_size"] == 8
    assert r["fa_us"] == 600.0 and r["fa_vs_sdpa"] == pytest.approx(660 / 600)  # FA4-only over cuDNN SDPA
    assert r["serial_best_is"] == "serial_fa4" and r["serial_best_us"] == 900.0
    assert r["best_unfused_is"] == "pipelined" and r["best_fused_is"] == "fused_perchunk"  # never fused_hbm
    assert r["hiding_ratio_paired"] == pytest.approx(1 - 60 / 300) and r["e_res_paired_us"] == 60.0
    assert r["speedup_vs_serial_best"] == pytest.approx(900 / 650)
    assert r["speedup_vs_best_unfused"] == pytest.approx(700 / 650)
    assert r["e_res_paired_allhost_us"] == 75.0 and r["pipelined_g2_us"] == 760.0
    # the same lease's Triton kernel beside it: slower FA, but the fastest fused path here
    assert r["triton_fa_us"] == 800.0 and r["fa_fastest_is"] == "fa4"
    assert r["fastest_fused_is"] == "triton_fused" and r["fastest_fused_vs_unfused"] == pytest.approx(700 / 640)
    assert r["target_fa_vs_sdpa_ge_1"] is True and r["target_fused_within_3pct"] is False
    assert rows[1]["fa_us"] == pytest.approx(660.0)  # run1, not the persistent file's 300


def test_results_attention_keeps_triton_rows_and_adds_fa4(data, capsys):
    from xstage.cli import main

    save_records(data / "attention" / "attention-kernel.parquet", "kernel", triton_frame(), {"config": {}})
    assert main(["results", "attention", "--data", str(data), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["fa_core"] for r in rows] == ["triton", "fa4", "fa4"]
    assert "run" not in rows[0] and rows[0]["fa_vs_sdpa"] == pytest.approx(660 / 800)
    assert [r["M"] for r in summarize(data, platform="h200-pcie-host")] == [16384] * 3
    assert main(["results", "attention", "--data", str(data), "--platform", "nonesuch"]) == 2


def test_compare_fa4_replays_every_fused_variant_but_the_diagnostic(data):
    from xstage.sim.platform import load_platform

    frame = fa4_frame().assign(record_file="rep")
    out = compare_fa4(pd.concat([frame, fa4_frame(0.5, "persistent").assign(record_file="p")]),
                      load_platform("h200-pcie-host"))
    assert sorted(out["variant"]) == ["fused_allhost", "fused_perchunk"] and set(out["record_file"]) == {"rep"}
    a, p = out.set_index("variant").loc["fused_allhost"], out.set_index("variant").loc["fused_perchunk"]
    assert a["measured_fa_only(us)"] == 600.0 and a["send"] == "tile end"
    assert a["measured_hiding_ratio_paired"] == pytest.approx(0.75)
    assert a["simulated_fused(us)"] == pytest.approx(600.0 + a["simulated_e_res(us)"])
    # the all-host variant sends the own chunk over PCIe too: more bytes than the exact layout
    assert a["own_chunk_remote"] and not p["own_chunk_remote"]
    assert a["simulated_a2a(us)"] == pytest.approx(p["simulated_a2a(us)"] * 8 / 7)


def test_xstage_compare_on_an_fa4_folder(data, capsys):
    from xstage.cli import main

    assert main(["compare", str(data / "attention-fa4" / "run1"), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["attention_fa4"]["fused_n_points"] == 2 and "skipped" not in metrics


def test_the_attention_page_draws_fa4_beside_triton(data):
    from xstage.compare.attention import compare_fa4, fa4_summary
    from xstage.compare.frames import load_kind
    from xstage.dashboards.page_attention import residual_figure, speedup_figure, tables
    from xstage.sim.platform import load_platform

    kernel = load_kind(data, "kernel")
    fa4 = fa4_summary(kernel[kernel["experiment"] == "attention-fa4"])
    assert sorted(zip(fa4["run"], fa4["headline"])) == [("rep", True), ("run1", False)]
    cmp_ = compare_fa4(kernel[kernel["experiment"] == "attention-fa4"], load_platform("h200-pcie-host"))
    sim = pd.DataFrame(columns=["shape", "M", "E_res/T_FA", "E_cc/T_FA", "model_E_cc_us", "fa_us"])
    names = [t.name for t in residual_figure(sim, None, "t", fa4=fa4, fa4_compare=cmp_).data]
    assert any("FA4 rep, headline" in n for n in names) and any("FA4 run1" in n for n in names)
    assert any(n.startswith("replay of the FA4 best fused") for n in names)
    speed = {t.name: list(t.y) for t in speedup_figure(sim, None, "t", fa4=fa4).data}
    key = next(n for n in speed if "over serial-best (FA4 rep" in n)
    assert speed[key] == pytest.approx([900 / 650])
    assert "FA4 as the FA core (measured, per run)" in tables({"sim": sim, "fa4": fa4, "fa4_compare": cmp_})


def test_the_attention_page_without_fa4_records_draws_no_fa4_series():
    from xstage.dashboards.page_attention import residual_figure, speedup_figure

    sim = pd.DataFrame(columns=["shape", "M", "E_res/T_FA", "E_cc/T_FA", "model_E_cc_us", "fa_us"])
    assert not [t for t in residual_figure(sim, None, "t").data if "FA4" in t.name]
    assert not [t for t in speedup_figure(sim, None, "t").data if "FA4" in t.name]
