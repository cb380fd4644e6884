"""The Gluon MoE kernel's options (CPU, no torch or triton) and, on a GPU with triton's Gluon, its check."""

import pytest

from xstage.errors import InputError
from xstage.hw.moe.gluon_args import GLUON_DEFAULTS, gluon_options, shared_estimate, stage_bytes


def test_defaults_pass_and_merge():
    assert gluon_options(None, 1536, 1536, 128, 128) == GLUON_DEFAULTS
    got = gluon_options({"stages": 2, "block_k": 32}, 7168, 512, 128, 128)
    assert got["stages"] == 2 and got["block_k"] == 32 and got["num_warps"] == GLUON_DEFAULTS["num_warps"]


@pytest.mark.parametrize("opts, field", [({"stage": 3}, "gluon.stage"), ({"stages": 1}, "gluon.stages"),
                                         ({"stages": True}, "gluon.stages"), ({"stages": "3"}, "gluon.stages"),
                                         ({"block_k": 48}, "gluon.block_k"), ({"num_warps": 6}, "gluon.num_warps"),
                                         ({"maxnreg": 100}, "gluon.maxnreg")])
def test_bad_options_name_the_field(opts, field):
    with pytest.raises(InputError) as err:
        gluon_options(opts, 1536, 1536, 128, 128)
    assert err.value.field == field


def test_block_k_must_divide_both_gemms_and_tiles_fit_the_warps():
    with pytest.raises(InputError, match="block_k"):
        gluon_options({"block_k": 128}, 1536, 1600, 128, 128)
    with pytest.raises(InputError, match="tiles"):
        gluon_options({"num_warps": 8}, 1536, 1536, 64, 128)
    with pytest.raises(InputError, match="tiles"):
        gluon_options(None, 1536, 1536, 128, 96)


def test_stage_ring_bytes():
    assert stage_bytes(128, 128, 64) == 32768
    # three stages of the default tiles fit twice per SM (233472 B) with room for the epilogue's scratch
    assert 2 * (shared_estimate(128, 128, 64, 3) + 1024) < 233472 - 2 * 16384
    assert shared_estimate(128, 128, 32, 4) == shared_estimate(128, 128, 64, 2) + 2 * 2 * 8  # two more stages: four more mbarriers


@pytest.mark.gpu
def test_gpu_gluon_kernel_matches_reference():
    """Both schedules into a poisoned local Combine on fresh inputs: every row written, no stray stores, float32
    reference, error flag clear; and a D = 0 schedule trips the loader's bounded wait."""
    torch = pytest.importorskip("torch", reason="the GPU check needs torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an SM90 GPU (warpgroup MMA)")
    pytest.importorskip("triton.experimental.gluon", reason="needs triton's Gluon (3.6)")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"))
    import moe_gluon as MG

    from xstage.hw.moe.gluon_launch import launch_moe_gluon
    from xstage.hw.moe.setup import Setup, num_sms
    from xstage.sim.workloads.moe_layout import MoeProblem

    s = Setup(MoeProblem(1536, 512, 3000, local_experts=4, routing="skewed", seed=9), 2 * num_sms(False), seed=21,
              group_rows=16)
    kw = {"gluon": True}   # through Setup.run, as the bench's --short-k-kernel '{"gluon": true}' runs it
    c = MG.check(s, lambda sc: s.run(sc, False, kw), s.problem.label(), "gluon", s.reference())
    assert c["ok"], c
    p = s.problem
    count = torch.zeros((p.world_size, p.combine_rows, p.hidden // p.block_n), dtype=torch.int32, device="cuda")
    log = torch.zeros((len(s.dev["interleaved"].tiles_np), 8), dtype=torch.int64, device="cuda")
    s.run("interleaved", True, kw, write_count=count, tile_log=log)
    torch.cuda.synchronize()
    valid = int(torch.as_tensor(s.layout.valid).sum())
    assert int(count.max()) == 1 and int((count > 0).sum()) == valid * (p.hidden // p.block_n)
    assert bool((log[:, 5] >= log[:, 4]).all()) and bool((log[:, 7] >= log[:, 5]).all()) and int(log[:, 4].min()) > 0
    assert MG.bail_check(s, {})["ok"]
    del launch_moe_gluon


def test_run_options_come_from_the_gluon_prefixed_keys():
    from xstage.hw.moe.gluon_args import run_options

    kw = {"gluon": True, "gluon_stages": 4, "gluon_early_rows": True, "block_k": 64, "num_stages": 3}
    assert run_options(kw) == {"stages": 4, "early_rows": True}
    assert gluon_options(run_options(kw), 1536, 1536, 128, 128)["early_rows"] == 1


def test_bench_short_k_file_takes_gluon_keys(tmp_path):
    from xstage.cli.bench_moe import kernel_options

    good = tmp_path / "good.json"
    good.write_text('{"gluon": true, "gluon_stages": 3, "gluon_early_rows": 0, "group_rows": 16}')
    assert kernel_options(str(good))["gluon_stages"] == 3
    for text, field in (('{"gluon_stage": 3}', "--short-k-kernel gluon_stage"),
                        ('{"gluon_stages": 1}', "--short-k-kernel gluon_stages"),
                        ('{"gluon_place": 2}', "--short-k-kernel gluon_place"),
                        ('{"gluon": 1}', "--short-k-kernel gluon")):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(InputError) as err:
            kernel_options(str(bad))
        assert err.value.field == field


def test_bench_pairs_the_gluon_kernel_with_the_triton_kernel_it_replaces():
    from xstage.hw.moe.bench import BF16_SHORT_K, alt_kw, alt_tag, config_tiles

    kw = {"gluon": True, "gluon_stages": 3}
    blocks, pps, got = config_tiles("bf16", 1536, {}, {}, False, short_k=kw, hidden=1536)
    assert got["gluon"] and got["gluon_stages"] == 3 and pps == BF16_SHORT_K["programs_per_sm"]
    assert alt_kw(got) == BF16_SHORT_K["kernel"] and alt_tag(got) == "triton"
