"""FA4 on a real GPU (marker ``gpu``; skipped without CUDA or flash-attn-4): every variant's destinations at a
small M, through the real FA4, host-mapped memory and copy engine. On the lent H200:
``pytest -m gpu tests/hw/test_fa4_gpu.py -q`` (benchmarks/gpu/attention_fa4.sh runs the same checks at full size)."""

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def fa():
    torch = pytest.importorskip("torch", reason="needs a CUDA GPU with torch (torch is not installed here)")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch sees none)")
    pytest.importorskip("flash_attn.cute", reason="needs a CUDA GPU with flash-attn-4 (not installed here)")
    from xstage.hw.attention import fa4

    return fa4.load()


@pytest.mark.parametrize("rank", [0, 5])
def test_every_fa4_variant_writes_exactly_its_slice(fa, rank):
    import torch

    from xstage.hw.attention.fa4 import err_vs_ref, reference_rows
    from xstage.hw.attention.fa4_layout import ReceiveLayout
    from xstage.hw.attention.fa4_variants import Fa4Case
    from xstage.hw.common.vmm import MixedRange

    torch.backends.cuda.matmul.allow_tf32 = False
    case = Fa4Case(ReceiveLayout(4096, 3, 128, 8, rank), fa, seed=rank, vmm_alloc=MixedRange, tile_mns=[(128, 64)],
                   stagger_us=[20.0])
    fns = case.variants()
    fns["fa4"]()
    torch.cuda.synchronize()
    assert err_vs_ref(case.fa_out[0, 1000:1128], reference_rows(case.q, case.k, case.v, 1000, 1128))["ok"]
    want = case.fa_out[0].clone()
    cudnn = fns["cudnn"]()[0].contiguous()
    for name, fn in fns.items():
        if case.plan(name) is not None:
            res = case.check(name, fn, cudnn if name == "serial_cudnn" else want)
            assert res["ok"], (name, res)
    case.free()


def test_persistent_kernel_is_stock_fa4_bitwise_and_writes_every_element(fa):
    """PersistentSm90 (and its diagnostics) into NaN-poisoned outputs: every element written, bitwise equal to
    stock FA4 (same mainloop), M not a multiple of the grid's tile count; and into the mixed VMM range."""
    import torch

    from xstage.hw.attention import fa4
    from xstage.hw.attention.fa4_layout import ReceiveLayout
    from xstage.hw.attention.fa4_persistent import NAMES, SPLIT_KERNELS
    from xstage.hw.attention.fa4_variants import Fa4Case
    from xstage.hw.common.vmm import MixedRange

    for M in (4096, 12288):
        gen = torch.Generator(device="cuda").manual_seed(M)
        q, k, v = (torch.randn((1, M, 3, 128), device="cuda", generator=gen).to(torch.bfloat16) for _ in range(3))
        want = torch.empty_like(q)
        fa(q, k, v, want)
        for kern in [n for n in NAMES if n not in SPLIT_KERNELS]:  # their split tiles: test_split_kernel_...
            run = fa4.load_persistent(kern)
            for launch in range(3):  # the dynamic scheduler's counter must be back at 0 after each launch
                got = torch.full_like(q, float("nan"))
                run(q, k, v, got)
                torch.cuda.synchronize()
                assert int(torch.isnan(got).sum()) == 0 and torch.equal(got, want), (M, kern, launch)
    # M = 8K: each rank's chunk (6 MiB) a whole number of VMM granules (2 MiB), so the mixed range exists
    case = Fa4Case(ReceiveLayout(8192, 3, 128, 8, 2), fa, seed=2, vmm_alloc=MixedRange, pfa=fa4.load_persistent())
    fns = case.variants()
    fns["fa4"]()
    torch.cuda.synchronize()
    want = case.fa_out[0].clone()
    for name in ("fused_vmm_pers", "fused_allhost_pers", "serial_pfa4"):
        res = case.check(name, fns[name], want)
        assert res["ok"] and res["bitwise_equal"], (name, res)
    case.free()


def test_split_kernel_matches_the_reference_and_stock_fa4_on_whole_tiles(fa):
    """staggersplit into NaN-poisoned outputs, three launches, fresh random inputs each: every element written,
    float32 reference on row slices, within 1e-2 of stock FA4 everywhere and bitwise on its whole tiles (the
    merged tiles sum in another order); no owner timed out. M = 4K: every tile split (96 tiles < 132 CTAs);
    M = 12K: 2 whole waves + 24 split tiles."""
    import torch

    from xstage.hw.attention import fa4
    from xstage.hw.attention import fa4_persistent as P
    from xstage.hw.attention.fa4_layout import row_slices

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for kern, M in (("staggersplit", 4096), ("staggersplit", 12288), ("staggersplit1", 12288),
                    ("staggersplitw", 16384)):
        run = fa4.load_persistent(kern)
        whole = torch.ones((1, M, 3, 1), dtype=torch.bool, device="cuda")
        for m, h, _ in P.split_tiles(M // 128, 3, 1, 0, 8, sms):
            whole[0, m * 128:(m + 1) * 128, h] = False
        w = whole.expand(1, M, 3, 128)
        for launch in range(3):  # flags reset by each owner: a stale partial would fail the next launch
            gen = torch.Generator(device="cuda").manual_seed(M + launch)
            q, k, v = (torch.randn((1, M, 3, 128), device="cuda", generator=gen).to(torch.bfloat16) for _ in range(3))
            want = torch.empty_like(q)
            fa(q, k, v, want)
            got = torch.full_like(q, float("nan"))
            run(q, k, v, got)
            torch.cuda.synchronize()
            assert int(torch.isnan(got).sum()) == 0, (kern, M, launch)
            assert torch.equal(got[w], want[w]), (kern, M, launch)
            assert float((got.float() - want.float()).abs().max()) <= 1e-2, (kern, M, launch)
            for r0, r1 in row_slices(M, 128):
                e = fa4.err_vs_ref(got[0, r0:r1], fa4.reference_rows(q, k, v, r0, r1))
                assert e["ok"], (kern, M, launch, r0, e)
    assert P.split_timeouts() == 0
