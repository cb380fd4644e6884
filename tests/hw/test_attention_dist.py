"""W-rank FlashAttention + A2A without GPUs: Serial-best's NCCL permute, rank 0's records, the summary
(maximum over ranks), the compare layer, and bad arguments."""

import json
import re

import numpy as np
import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.sim.workloads.a2a_layout import A2ALayout, all_to_all
from xstage.hw.attention.config import AttentionConfig
from xstage.compare.attention_records import summarize, summary_rows
from xstage.records.attention import kernel_row, save_run

torch = pytest.importorskip("torch")
D = pytest.importorskip("xstage.hw.attention.dist")
from xstage.cli import bench_attention_dist as DA  # noqa: E402 - the flags of the W-rank run


def simulated_all_to_all_single(sends: list) -> list:
    """What ``all_to_all_single`` with equal splits gives rank j: chunk j of every sender, in rank order."""
    W = len(sends)
    c = sends[0].shape[0] // W
    return [torch.cat([s[j * c:(j + 1) * c] for s in sends]) for j in range(W)]


@pytest.mark.parametrize("W,H,M,d,strided", [(1, 3, 16, 8, False), (2, 1, 8, 4, True), (4, 3, 32, 8, True),
                                             (8, 3, 64, 4, False), (8, 2, 128, 8, True)])
def test_nccl_permute_is_the_sequence_partitioned_layout(W, H, M, d, strided):
    gen = torch.Generator().manual_seed(W * 100 + M)
    if strided:  # SDPA's output: an (M, H, d) view of (H, M, d)
        outs = [torch.randn((H, M, d), generator=gen).permute(1, 0, 2) for _ in range(W)]
    else:
        outs = [torch.randn((M, H, d), generator=gen) for _ in range(W)]
    recvs = simulated_all_to_all_single([D.send_rows(o) for o in outs])
    dests = [D.permute_received(r, torch.full((M // W, W * H, d), float("nan"))) for r in recvs]
    expected = all_to_all([o.numpy() for o in outs])
    for got, want in zip(dests, expected):
        np.testing.assert_array_equal(got.numpy(), want)
    bm = M // W // 2 if M // W >= 2 else 1
    for r, o in enumerate(outs):  # every tile where the fused kernel's plan puts it
        for t in A2ALayout(M, H, d, W, r, block_m=bm).tile_plan().itertuples():
            got = dests[t.dest_rank][t.dest_row0:t.dest_row0 + bm, t.dest_head]
            assert torch.equal(got, o[t.row0:t.row0 + bm, t.head])


def test_permute_rejects_mismatched_shapes():
    with pytest.raises(InputError, match="recv/dest shapes"):
        D.permute_received(torch.zeros(64, 3, 8), torch.zeros(8, 16, 8))  # W = 8 needs 24 heads
    with pytest.raises(InputError, match="o.shape"):
        D.send_rows(torch.zeros(64, 24))


def _rank_rows(M, rank, W=8, slow_rank=5):
    cfg = AttentionConfig(M, 3, 128, W, rank)
    scale = M / 8192
    times = {"fa": 100.0, "fused": 110.0, "serial": 160.0, "a2a": 55.0, "sdpa_cudnn": 80.0, "sdpa_flash": 85.0,
             "serial_best_cudnn": 150.0, "serial_best_flash": 152.0, "nccl_cudnn": 70.0, "nccl_flash": 67.0}
    if rank == slow_rank:  # the slowest rank: Fused 20 us later, and cuDNN slower than flash
        times.update(fused=130.0, sdpa_cudnn=95.0, serial_best_cudnn=170.0)
    paired = {"fused": 8.0 + rank, "serial": 40.0}
    return [kernel_row(cfg, v, [scale * t, scale * t + 1, scale * t - 1], platform="h200-nvlink", timing="graph",
                       **({"paired_minus_fa(us)": paired[v]} if v in paired else {})) for v, t in times.items()]


def test_gather_aliases_the_backend_of_the_slowest_rank():
    per_rank = [_rank_rows(8192, r) for r in range(8)]
    rows = D.gather_rows(per_rank, ("cudnn", "flash"), clocks_before="1980 MHz")
    aliases = [r for r in rows if r["variant"] in D.NCCL_ALIASES]
    assert len(aliases) == 3 * 8 and {r["backend"] for r in aliases} == {"flash"}  # max: flash 85 < cudnn 95
    assert all(r["clocks_before"] == "1980 MHz" for r in rows)
    with pytest.raises(InputError, match="ranks"):
        D.gather_rows([per_rank[0], per_rank[0]])


def test_slowest_rank_takes_the_maximum_row_by_row():
    per_rank = [_rank_rows(8192, r)[:2] for r in range(8)]
    fa, fused = D.slowest_rank(per_rank)
    assert fa["time(us)"] == 100.0 and fused["time(us)"] == 130.0 and fused["ranks"] == 8 and fused["rank"] == 0


def _save_dist(tmp_path, seq_lens=(8192, 16384)):
    rows = []
    for M in seq_lens:
        rows += D.gather_rows([_rank_rows(M, r) for r in range(8)])
    save_run(tmp_path / "attention-dist", rows, [], [{"variant": "fused", "ok": True}], {"world_size": 8}, False)
    return rows


def test_records_summary_takes_the_slowest_rank(tmp_path):
    rows = _save_dist(tmp_path)
    summary = summarize(tmp_path)
    assert [(r["M"], r["ranks"], r["platform"]) for r in summary] == [(8192, 8, "h200-nvlink"), (16384, 8, "h200-nvlink")]
    s = summary[0]
    assert s["fa_us"] == 100.0 and s["fused_us"] == 130.0 and s["serial_us"] == 160.0
    assert s["sdpa_us"] == 85.0 and s["serial_best_us"] == 152.0 and s["nccl_us"] == 67.0  # flash, every rank
    assert s["hiding_ratio"] == pytest.approx(1 - 30 / 60) and s["e_res_us"] == 30.0
    assert s["speedup_vs_serial_best"] == pytest.approx(152 / 130)
    assert s["e_res_paired_us"] == 15.0 and s["hiding_ratio_paired"] == pytest.approx(1 - 15 / 40)  # rank 7's
    one_rank = summary_rows(pd.DataFrame([r for r in rows if r["rank"] == 0]))[0]
    assert one_rank["fused_us"] == 110.0 and one_rank["ranks"] == 1
    tune = kernel_row(AttentionConfig(4096, 3, 128, 8), "fa_tune", [50.0], platform="h200-nvlink")
    assert [r["M"] for r in summary_rows(pd.DataFrame(rows + [tune]))] == [8192, 16384]  # no row of tuning alone


def test_results_cli_one_row_per_platform_and_M(tmp_path, capsys):
    pytest.importorskip("triton")
    from xstage.cli import main

    _save_dist(tmp_path)
    one_gpu = [kernel_row(AttentionConfig(8192), v, [t]) for v, t in
               (("fa", 90.0), ("fused", 95.0), ("serial", 120.0), ("serial_best", 100.0), ("sdpa", 70.0))]
    save_run(tmp_path / "attention", one_gpu, [], [], {}, False)
    assert main(["results", "attention", "--data", str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["platform"], r["M"]) for r in rows] == [("h200-nvlink", 8192), ("h200-nvlink", 16384),
                                                       ("h200-pcie-host", 8192)]
    for key in ("M", "fa_us", "serial_us", "fused_us", "serial_best_us", "sdpa_us", "fa_tflops", "hiding_ratio",
                "speedup_vs_serial", "speedup_vs_serial_best"):
        assert all(key in r for r in rows)
    assert main(["results", "attention", "--data", str(tmp_path), "--platform", "h200-nvlink", "--json"]) == 0
    assert [r["fused_us"] for r in json.loads(capsys.readouterr().out)] == [130.0, 260.0]


def test_compare_replays_the_slowest_rank_on_a_named_platform(tmp_path, capsys):
    from xstage.compare.attention import compare_attention
    from xstage.sim.platform import load_platform

    _save_dist(tmp_path)
    kernel = pd.read_parquet(tmp_path / "attention-dist" / "attention-kernel.parquet")
    rows = compare_attention(kernel, load_platform("paper-b200"))
    assert rows["M"].tolist() == [8192, 16384] and rows["ranks"].tolist() == [8, 8]
    assert rows["measured_fused(us)"].tolist() == [130.0, 260.0]
    assert set(rows["simulated_platform"]) == {"paper-b200"} and set(rows["platform"]) == {"h200-nvlink"}
    from xstage.cli import main

    path = str(tmp_path / "attention-dist" / "attention-kernel.parquet")
    assert main(["compare", path, "--platform", "paper-b200", "--json"]) == 0
    assert "attention" in json.loads(capsys.readouterr().out)


def test_arguments_and_config_json(tmp_path):
    args, seq_lens, base = DA.parse_args(["--seq-lens", "8K,16384,64K"], world=8)
    assert seq_lens == [8192, 16384, 65536] and base.world_size == 8 and args.platform == "h200-nvlink"
    assert DA.parse_args(["--seq-len", "2048"], world=1)[1] == [2048]
    assert DA.parse_args([], world=1)[0].platform == "h200-local"
    f = tmp_path / "cfg.json"
    f.write_text('{"block_n": 128, "num_stages": 3, "tma": true, "store_cache": ""}')
    args, _, base = DA.parse_args(["--config", str(f)], world=8)
    assert (base.block_n, base.tma, base.store_cache) == (128, True, "") and args.config_fields[0] == "block_n"
    cfg, fields = DA.config_from_json('{"drip": true}', AttentionConfig(16384))
    assert cfg.drip and fields == ["drip"]


@pytest.mark.parametrize("argv,field", [
    (["--seq-lens", "abc"], "--seq-lens"),
    (["--seq-lens", "1000"], "seq_len"),            # not divisible by W = 8
    (["--config", '{"bogus": 1}'], "--config"),
    (["--config", '{"seq_len": 4096}'], "--config"),  # the run sets the shape
    (["--config", "not json"], "--config"),
    (["--config", '{"head_dim": 96}'], "head_dim"),
    (["--trials", "0"], "--trials"),
])
def test_bad_arguments_one_line_exit_2(argv, field, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert DA.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"attention_dist: error: {field}(=")


def test_existing_records_are_not_overwritten(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    _save_dist(tmp_path)
    assert DA.main(["--out", str(tmp_path / "attention-dist")]) == 2
    assert "--overwrite" in capsys.readouterr().err


def test_no_gpu_is_one_line_exit_2(capsys, monkeypatch):
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert DA.main(["--seq-len", "2048"]) == 2
    assert capsys.readouterr().err.strip() == ("attention_dist: error: device(='cpu') needs one CUDA GPU per rank "
                                                "(run under torchrun)")


def test_bench_variants_fused_first_then_every_option():
    pytest.importorskip("triton")
    from xstage.hw.attention import variants as B

    cfg = AttentionConfig(1024, 1, 64, 2, store_cache=".wt")
    fns, cfgs = B.kernel_variants(cfg, None, None, None, None, None)
    others = [o for o in B.FUSED_OPTIONS if o != B.fused_choice(cfg)]
    assert len(others) == len(B.FUSED_OPTIONS) - 1
    assert list(fns) == ["fa", "fused"] + [f"fused{B.fused_tag(*o)}" for o in others] + [
        "serial", "a2a", "serial_wb", "a2a_wb", "serial_cs", "a2a_cs"]
    assert cfgs["fused_wb_drip_split"].drip and cfgs["fused_wb_split_stagger"].stagger
    assert B.fused_options(cfg, ("", False, True, True, 0)).tail_parts == 0 and cfgs["fused_wb_split"].tail_parts == 2
    assert B.fused_tag("", False, True, True, 0) == "_wb_splitbal_stagger" and B.fused_tag(".wt", False, True, False, 5) \
        == "_wt_split5"
    assert cfgs["serial_cs"].store_cache == ".cs" and list(cfgs) == list(fns)


def test_dry_run_of_the_whole_rank_path(tmp_path):
    """World size 1 on the CPU (gloo, Triton interpreter, tiny blocks): checks, every variant timed once,
    Serial-best through all_to_all_single, rank 0's records and the summary."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    out = tmp_path / "attention-dist"
    env = {**os.environ, "TRITON_INTERPRET": "1", "WORLD_SIZE": "1"}
    proc = subprocess.run([sys.executable, "-m", "xstage.hw.attention.dist", "--dry-run", "--seq-lens", "32",
                           "--check-seq-lens", "none", "--heads", "2", "--head-dim", "64", "--trials", "1",
                           "--out", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"checks: \d+ rows, 0 failed", proc.stdout), proc.stdout[-500:]
    checks = json.loads((out / "attention-checks.json").read_text())
    best = next(c for c in checks if c["variant"] == "serial_best_math")
    assert best["ok"] and best["unwritten"] == 0 and best["rel_err_vs_fused"] < 1e-2
    (row,) = summarize(tmp_path)
    assert row["platform"] == "h200-local" and row["ranks"] == 1 and row["world_size"] == 1
    for key in ("fa_us", "serial_us", "fused_us", "serial_best_us", "sdpa_us", "nccl_us", "fused_wb_us", "a2a_us"):
        assert row[key] > 0, key
    assert "e_res_paired_us" in row  # the matched pairs ran (0 on the CPU)
