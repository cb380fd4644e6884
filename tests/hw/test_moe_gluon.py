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

    from xstage.hw.moe.gluon import launch_moe_gluon
    from xstage.hw.moe.setup import Setup, num_sms
    from xstage.sim.workloads.moe_layout import MoeProblem

    s = Setup(MoeProblem(1536, 512, 3000, local_experts=4, routing="skewed", seed=9), 2 * num_sms(False), seed=21,
              group_rows=16)
    c = MG.check(s, lambda sc: launch_moe_gluon(s.x, s.w1_packed, s.w2, s.act, s.dev[sc], s.combine[False]),
                 s.problem.label(), "gluon", s.reference())
    assert c["ok"], c
    assert MG.bail_check(s, {})["ok"]
