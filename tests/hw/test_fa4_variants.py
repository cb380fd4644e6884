"""Every FA4 variant's destinations on CPU (fake streams, copies and FA4; tests/hw/fa4_fakes.py): each writes
all of this rank's heads, nothing else, with FA4's values; a faulty FA or copy is caught."""

import functools
import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs torch (the FA4 layout is tested on CPU torch tensors)")

from xstage.hw.attention import fa4_layout as L
from xstage.hw.attention.fa4 import Fa4
from xstage.hw.attention.fa4_variants import Fa4Case

_spec = importlib.util.spec_from_file_location("fa4_fakes", Path(__file__).with_name("fa4_fakes.py"))
fakes = importlib.util.module_from_spec(_spec)
sys.modules["fa4_fakes"] = fakes
_spec.loader.exec_module(fakes)


def make_case(monkeypatch, rank=0, impl=fakes.sdpa_impl, M=1024, vmm=True, W=8, H=2):
    fakes.fake_cuda(monkeypatch)
    lay = L.ReceiveLayout(M, H, 64, W, rank)
    return Fa4Case(lay, Fa4(impl), device="cpu", seed=rank, host_alloc=fakes.Buffer,
                   vmm_alloc=fakes.MixedBuffer if vmm else None, tile_mns=[(128, 64)], stagger_us=[40.0])


EXPECTED = {"fa4", "cudnn", "ce", "serial_fa4", "serial_cudnn", "pipelined", "pipelined_g2", "pipelined_g4",
            "fused_allhost", "fused_perchunk", "fused_perchunk_st40", "fused_cm", "fused_hbm", "fused_vmm",
            "fused_vmm_cm", "fa4_t128x64", "fused_allhost_t128x64"}


@pytest.mark.parametrize("rank", [0, 3, 7])
def test_every_variant_writes_exactly_its_slice(monkeypatch, rank):
    case = make_case(monkeypatch, rank)
    fns = case.variants()
    assert set(fns) == EXPECTED
    case.fa(case.q, case.k, case.v, case.fa_out)
    want = case.fa_out[0].clone()
    checked = 0
    for name, fn in fns.items():
        if case.plan(name) is None:
            continue
        exp = fakes.sdpa_cudnn(case.q, case.k, case.v)[0] if name == "serial_cudnn" else want
        res = case.check(name, fn, exp)
        assert res["ok"] and res["unwritten"] == 0 and res["stray"] == 0, (name, res)
        checked += 1
    assert checked == len(EXPECTED) - 3
    case.free()


def test_a_missing_row_is_caught_in_every_fused_variant(monkeypatch):
    case = make_case(monkeypatch, 2, impl=functools.partial(fakes.sdpa_impl, skip_last_row=True))
    want = torch.zeros(1024, 2, 64, dtype=torch.bfloat16)
    for name, fn in case.variants().items():
        if name.startswith("fused"):
            res = case.check(name, fn, want)
            assert not res["ok"] and res["unwritten"] > 0, name


def test_a_stray_copy_is_caught(monkeypatch):
    case = make_case(monkeypatch, 1)
    case.fa(case.q, case.k, case.v, case.fa_out)
    want = case.fa_out[0].clone()
    good = fakes.memcpy2d

    def shifted(dst, dpitch, src, spitch, width, height, stream):  # one head too far right
        good(dst + 2 * 64 * 2, dpitch, src, spitch, width, height, stream)

    monkeypatch.setattr("xstage.hw.common.hostmap.memcpy2d_async", shifted)
    res = case.check("serial_fa4", case.variants()["serial_fa4"], want)
    assert not res["ok"] and res["stray"] > 0 and res["unwritten"] > 0


def test_vmm_refused_means_no_vmm_variants(monkeypatch):
    def refuse(*a):
        raise RuntimeError("CUDA driver error CUDA_ERROR_NOT_SUPPORTED")

    fakes.fake_cuda(monkeypatch)
    lay = L.ReceiveLayout(1024, 2, 64, 8, 0)
    case = Fa4Case(lay, Fa4(fakes.sdpa_impl), device="cpu", host_alloc=fakes.Buffer, vmm_alloc=refuse)
    assert "NOT_SUPPORTED" in case.vmm_error
    assert not any(n.startswith("fused_vmm") for n in case.variants())


def test_bench_checks_and_timing_on_cpu(monkeypatch):
    """fa4_bench.check_case and time_case run the project's timers (host clock on CPU)."""
    from xstage.compare.attention_fa4 import summarise
    from xstage.hw.attention import fa4_bench, fa4_records

    case = make_case(monkeypatch, 1, M=256, vmm=False, W=2, H=1)
    fns = case.variants()
    rows = fa4_bench.check_case(case, fns, log=lambda m: None)
    bad = [r for r in rows if r.get("ok") is False]
    assert not bad, bad
    assert {r["variant"] for r in rows if "unwritten" in r} == {n for n in fns if case.plan(n) is not None}
    times, paired, modes = fa4_bench.time_case(fns, trials=10, pairs=10)
    assert set(times) == set(fns) and all(len(t) >= 10 for t in times.values())
    assert "fa4" not in paired and "fused_allhost" in paired
    krows = [fa4_records.kernel_row(case.lay, n, [x * 1e3 + 1 for x in t], timing=modes[n],
                                    **({"paired_minus_fa(us)": 1.0} if n in paired else {})) for n, t in times.items()]
    s = summarise(krows)[0]
    assert s["M"] == 256 and "fused_perchunk" in s["fused"]



def test_persistent_variants_write_exactly_their_slice_and_a_faulty_kernel_is_caught(monkeypatch):
    fakes.fake_cuda(monkeypatch)
    lay = L.ReceiveLayout(1024, 2, 64, 8, 3)
    bad = functools.partial(fakes.sdpa_impl, skip_last_row=True)
    case = Fa4Case(lay, Fa4(fakes.sdpa_impl), device="cpu", seed=3, host_alloc=fakes.Buffer,
                   vmm_alloc=fakes.MixedBuffer, pfa=Fa4(fakes.sdpa_impl), pdiag={"lsu": Fa4(bad)})
    fns = case.variants()
    pers = {"pfa4", "serial_pfa4", "fused_allhost_pers", "fused_cm_pers", "fused_hbm_pers", "fused_vmm_pers",
            "fused_vmm_cm_pers", "pfa4_lsu", "fused_vmm_pers_lsu"}
    assert pers <= set(fns)
    case.fa(case.q, case.k, case.v, case.fa_out)
    want = case.fa_out[0].clone()
    for name in sorted(pers - {"pfa4", "pfa4_lsu"}):
        res = case.check(name, fns[name], want)
        assert res["ok"] == (name != "fused_vmm_pers_lsu"), (name, res)
    case.free()
