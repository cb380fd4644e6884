"""PersistentSm90's CPU-side parts (hw/attention/fa4_persistent.py, the bench's naming, the summary's own-FA
residuals); the kernel itself runs in tests/hw/test_fa4_gpu.py (marker gpu)."""

import sys
import types

import pytest

from xstage.compare import attention_fa4 as S
from xstage.hw.attention import fa4_persistent as P


def fake_flash_attn(monkeypatch):
    """flash_attn.cute's modules that ``installed`` rebinds, as plain namespaces (no CuTe DSL here)."""
    mods = {}
    for name in ("flash_attn", "flash_attn.cute", "flash_attn.cute.flash_fwd_sm90", "flash_attn.cute.interface",
                 "flash_attn.cute.cache_utils", "flash_attn.cute.tile_scheduler"):
        mods[name] = types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, mods[name])
    mods["flash_attn"].cute = mods["flash_attn.cute"]
    for short in ("flash_fwd_sm90", "interface", "cache_utils", "tile_scheduler"):
        setattr(mods["flash_attn.cute"], short, mods[f"flash_attn.cute.{short}"])
    m90, fi = mods["flash_attn.cute.flash_fwd_sm90"], mods["flash_attn.cute.interface"]
    m90.SingleTileScheduler = "single"
    fi.FlashAttentionForwardSm90 = "stock"

    def fwd(q, k, v, **kw):
        return (fi.FlashAttentionForwardSm90, m90.SingleTileScheduler, fwd.compile_cache)
    fwd.compile_cache = "stock-cache"
    fi._flash_attn_fwd = fwd
    mods["flash_attn.cute.cache_utils"].get_jit_cache = lambda name: f"cache:{name}"
    mods["flash_attn.cute.tile_scheduler"].StaticPersistentTileScheduler = "persistent"
    kern = types.ModuleType("xstage.hw.attention.fa4_persistent_kernel")
    kern.KERNELS = {k: f"class-{k}" for k in P.KERNELS}
    monkeypatch.setitem(sys.modules, "xstage.hw.attention.fa4_persistent_kernel", kern)
    monkeypatch.setattr(P, "_CACHE", {})
    return fi, m90


def test_installed_rebinds_only_while_a_call_runs(monkeypatch):
    fi, m90 = fake_flash_attn(monkeypatch)
    run = P.forward_impl(fi._flash_attn_fwd, kernel="lsu")
    assert run(1, 2, 3, causal=False) == ("class-lsu", "persistent", "cache:fwd-xstage-persistent-static-lsu")
    assert (fi.FlashAttentionForwardSm90, m90.SingleTileScheduler, fi._flash_attn_fwd.compile_cache) == \
        ("stock", "single", "stock-cache")  # stock FA4 compiles and caches as before
    assert fi._flash_attn_fwd(1, 2, 3) == ("stock", "single", "stock-cache")


def test_installed_restores_after_an_error(monkeypatch):
    fi, m90 = fake_flash_attn(monkeypatch)
    with pytest.raises(RuntimeError):
        with P.installed():
            assert fi.FlashAttentionForwardSm90 == "class-drain"
            raise RuntimeError("compile failed")
    assert (fi.FlashAttentionForwardSm90, m90.SingleTileScheduler) == ("stock", "single")


def test_each_kernel_has_its_own_compile_cache(monkeypatch):
    fi, _ = fake_flash_attn(monkeypatch)
    kernels = [k for k in P.KERNELS if k not in P.SPLIT_KERNELS]  # their own scheduler: test_split_plan_...
    caches = {P.forward_impl(fi._flash_attn_fwd, kernel=k)(0, 0, 0)[2] for k in kernels}
    assert len(caches) == len(kernels)


def test_lse_and_unknown_kernels_are_refused():
    run = P.forward_impl(lambda *a, **k: pytest.fail("must not run"))
    with pytest.raises(ValueError, match="LSE"):
        run(0, 0, 0, return_lse=True)
    with pytest.raises(ValueError, match="kernel"):
        P.forward_impl(lambda *a, **k: None, kernel="fast")
    with pytest.raises(ValueError, match="scheduler"):
        with P.installed(scheduler="lpt"):
            pass


def test_bench_names_the_kernel_of_each_variant():
    from xstage.hw.attention.fa4_bench import is_pers, pers_kernel

    assert [pers_kernel(n) for n in ("fa4", "fused_vmm", "serial_fa4", "pfa4", "serial_pfa4", "fused_vmm_pers",
                                     "pfa4_lsu", "fused_vmm_pers_waitend")] == \
        ["fa4", "fa4", "fa4", "drain", "drain", "drain", "lsu", "waitend"]
    assert not is_pers("fused_perchunk") and is_pers("fused_hbm_pers")


def _rows(times, paired):
    return [{"M": 16384, "variant": n, "time(us)": t, "flops": 4e12, "paired_minus_fa(us)": paired.get(n)}
            for n, t in times.items()]


def test_summary_residual_against_own_fa_only():
    times = {"fa4": 550.0, "cudnn": 600.0, "ce": 230.0, "serial_fa4": 860.0, "serial_cudnn": 900.0,
             "serial_pfa4": 850.0, "pfa4": 540.0, "fused_vmm": 740.0, "fused_vmm_pers": 700.0,
             "fused_hbm_pers": 541.0, "pfa4_lsu": 545.0, "fused_vmm_pers_lsu": 720.0}
    paired = {"serial_fa4": 310.0, "pfa4": -10.0, "fused_vmm": 190.0, "fused_vmm_pers": 150.0,
              "fused_hbm_pers": -9.0, "pfa4_lsu": -5.0, "fused_vmm_pers_lsu": 170.0, "serial_pfa4": 300.0}
    s = S.summarise(_rows(times, paired))[0]
    assert s["serial_best_is"] == "serial_pfa4" and s["serial_best_us"] == 850.0  # the fastest FA + CE
    assert s["pfa4_vs_sdpa"] == pytest.approx(600 / 540) and s["pfa4_minus_fa4_paired_us"] == -10.0
    f = s["fused"]
    assert f["fused_vmm_pers"]["e_res_own_paired_us"] == pytest.approx(160.0)
    assert f["fused_vmm_pers_lsu"]["e_res_own_paired_us"] == pytest.approx(175.0)
    assert "e_res_own_paired_us" not in f["fused_vmm"]
    assert s["best_fused_is"] == "fused_vmm_pers"  # fused_hbm_pers sends nothing: never the best fused
    assert s["best_pers_is"] == "fused_vmm_pers" and s["best_pers_e_res_own_paired_frac"] == pytest.approx(160 / 540)
    assert s["pfa4_lsu_vs_sdpa"] == pytest.approx(600 / 545) and s["pfa4_lsu_minus_fa4_paired_us"] == -5.0
    met = S.targets(s)
    assert met["pers_within_3pct_of_own_fa"] is False and met["fused_within_3pct"] is False


def test_own_fa_target_met_when_the_send_hides_behind_its_own_kernel():
    times = {"fa4": 2000.0, "cudnn": 2200.0, "serial_fa4": 2500.0, "pfa4_stagger": 2050.0,
             "fused_vmm_pers_stagger": 2080.0}
    paired = {"serial_fa4": 500.0, "pfa4_stagger": 45.0, "fused_vmm_pers_stagger": 90.0}
    s = S.summarise([dict(r, M=32768) for r in _rows(times, paired)])[0]
    assert s["best_pers_is"] == "fused_vmm_pers_stagger" and s["best_pers_e_res_own_paired_us"] == pytest.approx(45.0)
    assert S.targets(s)["pers_within_3pct_of_own_fa"] is True  # 45 / 2050 = 2.2 %
    assert S.targets(s)["fused_within_3pct"] is False  # 90 / 2000 against stock FA4
    assert "pers_within_3pct_of_own_fa" not in S.targets({"M": 32768})


def test_cli_refuses_an_unknown_diagnostic_kernel(capsys):
    from xstage.cli.bench_fa4 import main

    assert main(["--out", "/nonexistent/x", "--pers-diag", "waitend,turbo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--pers-diag" in err[0] and "turbo" in err[0]


@pytest.mark.parametrize("blocks,heads,batch,rank,world", [(64, 3, 1, 0, 8), (128, 3, 1, 5, 8), (16, 2, 2, 1, 2),
                                                           (512, 3, 1, 7, 8)])
def test_local_last_order_is_a_permutation_with_the_own_chunk_last(blocks, heads, batch, rank, world):
    n, chunk = blocks * heads * batch, blocks // world
    order = [P.local_last_tile(t, blocks, heads, batch, rank, world) for t in range(n)]
    assert sorted(order) == sorted((m, h, b) for b in range(batch) for h in range(heads) for m in range(blocks))
    own = [rank * chunk <= m < (rank + 1) * chunk for m, _, _ in order]
    n_own = chunk * heads * batch
    assert own == [False] * (n - n_own) + [True] * n_own  # every remote tile before every local one
    remote = [(b, h, m) for m, h, b in order[:n - n_own]]
    assert remote == sorted(remote)  # the remote part keeps FA4's order: (batch, head) major, m-block fastest


def test_plans_resolve_to_a_kernel_and_a_scheduler(monkeypatch):
    assert P.resolve("staggerll") == ("stagger", "local_last")
    assert P.resolve("drain1") == ("drain", "single")
    assert P.resolve("lsu", "static") == ("lsu", "static")
    with pytest.raises(ValueError, match="kernel"):
        P.resolve("fast")
    fi, m90 = fake_flash_attn(monkeypatch)
    assert P.forward_impl(fi._flash_attn_fwd, kernel="drain1")(0, 0, 0) == \
        ("class-drain", "single", "cache:fwd-xstage-persistent-single-drain")
    assert m90.SingleTileScheduler == "single"


def test_local_last_refuses_a_rank_chunk_of_partial_m_blocks():
    class Q:
        shape = (1, 4096 + 128, 3, 128)

    run = P.forward_impl(lambda *a, **k: pytest.fail("must not run"), kernel="staggerll", rank=0, world=8)
    with pytest.raises(ValueError, match="multiple of 128 x world"):
        run(Q(), 0, 0)
    with pytest.raises(ValueError, match="rank 8"):
        P.forward_impl(lambda *a, **k: None, kernel="drainll", rank=8, world=8)


def test_bench_names_the_new_kernels():
    from xstage.hw.attention.fa4_bench import pers_kernel

    assert [pers_kernel(n) for n in ("pfa4_drain1", "pfa4_staggerll", "fused_vmm_pers_staggerll")] == \
        ["drain1", "staggerll", "staggerll"]


def test_dynamic_plans_compile_into_an_in_process_cache_per_counter(monkeypatch):
    fi, m90 = fake_flash_attn(monkeypatch)
    sch = types.ModuleType("xstage.hw.attention.fa4_schedulers")
    sch.dynamic_scheduler = lambda addr: f"dyn-{addr:x}"
    sch.local_last_dynamic_scheduler = lambda addr, r, w: f"lldyn-{addr:x}-{r}-{w}"
    sch.local_last_scheduler = lambda r, w: f"ll-{r}-{w}"
    monkeypatch.setitem(sys.modules, "xstage.hw.attention.fa4_schedulers", sch)
    monkeypatch.setattr(P, "_counter", lambda: types.SimpleNamespace(data_ptr=lambda: 0xabc0))
    q = types.SimpleNamespace(shape=(1, 8192, 3, 128))
    cls, sched, cache = P.forward_impl(fi._flash_attn_fwd, kernel="staggerdyn")(q, 0, 0)
    assert (cls, sched, cache) == ("class-stagger", "dyn-abc0", {})  # never a disk cache: the address is compiled in
    assert P.forward_impl(fi._flash_attn_fwd, kernel="staggerlldyn", rank=3)(q, 0, 0)[1] == "lldyn-abc0-3-8"
    assert P.forward_impl(fi._flash_attn_fwd, kernel="staggerll", rank=2)(q, 0, 0)[1:] == \
        ("ll-2-8", "cache:fwd-xstage-persistent-local_last-r2w8-stagger")
    assert m90.SingleTileScheduler == "single"


@pytest.mark.parametrize("tiles,sms", [(384, 132), (768, 132), (1536, 132), (192, 132), (264, 132), (60, 132),
                                       (7, 4), (1, 2), (5, 2)])
def test_split_plan_covers_every_tile_once_and_partners_come_first(tiles, sms):
    whole, split, units, grid = P.split_plan(tiles, sms)
    assert whole % sms == 0 and split == tiles - whole < sms and units == whole + 2 * split
    seen = {}
    for u in range(units):
        t, word, pair = P.split_unit(u, whole)
        seen.setdefault(t, []).append((u, word, pair))
    assert sorted(seen) == list(range(tiles))
    for t, parts in seen.items():
        if t < whole:
            assert parts == [(t, P.split_word(1, 0), -1)]  # a whole tile: FA4's full K/V range, no pair
            continue
        (up, wp, pp), (uo, wo, po) = parts
        assert (wp, wo) == (P.split_word(2, 0), P.split_word(2, 1)) and pp == po == t - whole
        assert up < uo and up % grid != uo % grid  # the partner first, on another CTA: no owner waits on itself


def test_split_plan_at_16k_leaves_six_remote_tiles_to_the_last_half_wave():
    """The lead's count: at M = 16K (3 heads, W = 8, 132 SMs) the last partial wave holds 120 tiles, 72 of them
    remote; unsplit, all 72 end with the kernel. Split, pairs run side by side: 66 tiles end half a wave early,
    6 remote tiles (192 KiB) are left to drain after the end; at 32K and 64K none."""
    for M, late_remote in ((16384, 6), (32768, 0), (65536, 0)):
        blocks, sms = M // 128, 132
        whole, split, units, grid = P.split_plan(blocks * 3, sms)
        late = 0
        for i, (m, h, b) in enumerate(P.split_tiles(blocks, 3, 1, 0, 8, sms)):
            owner = whole + 2 * i + 1
            remote = not (0 <= m < blocks // 8)
            late += remote and (owner - whole) // grid == (units - whole - 1) // grid
        assert late == late_remote, M


def test_split_tiles_are_the_last_wave_of_the_local_last_order():
    tiles = P.split_tiles(128, 3, 1, 0, 8, 132)
    assert len(tiles) == 120
    own = [m < 16 for m, _, _ in tiles]
    assert own == [False] * 72 + [True] * 48
    at64k = P.split_tiles(512, 3, 1, 0, 8, 132)  # 1536 tiles = 11 waves + 84: own chunk only
    assert len(at64k) == 84 and all(m < 64 for m, _, _ in at64k)
    with pytest.raises(ValueError, match="sms"):
        P.split_plan(10, 1)


def test_split_kernel_and_scheduler_go_together(monkeypatch):
    assert P.resolve("staggersplit") == ("staggersplit", "local_last_split")
    assert P.resolve("staggersplit1") == ("staggersplit1", "local_last_split")
    assert P.resolve("staggerll1") == ("stagger1", "local_last")
    for sched, kern in (("static", "staggersplit"), ("local_last_split", "stagger"), ("local_last", "staggersplit")):
        with pytest.raises(ValueError, match="split last wave needs"):
            with P.installed(scheduler=sched, kernel=kern):
                pass
    run = P.forward_impl(lambda *a, **k: pytest.fail("must not run"), kernel="staggersplit", rank=0, world=8)
    with pytest.raises(ValueError, match="head dim 64"):
        run(types.SimpleNamespace(shape=(1, 8192, 3, 64)), 0, types.SimpleNamespace(shape=(1, 8192, 3, 64)))
    with pytest.raises(ValueError, match="multiple of 128 x world"):
        run(types.SimpleNamespace(shape=(1, 8192 + 128, 3, 128)), 0, types.SimpleNamespace(shape=(1, 8192, 3, 128)))


def test_split_plan_compiles_into_an_in_process_cache_per_workspace(monkeypatch):
    fi, m90 = fake_flash_attn(monkeypatch)
    sch = types.ModuleType("xstage.hw.attention.fa4_schedulers")
    sch.split_scheduler = lambda addr, r, w: f"split-{addr:x}-{r}-{w}"
    monkeypatch.setitem(sys.modules, "xstage.hw.attention.fa4_schedulers", sch)
    kern = types.ModuleType("xstage.hw.attention.fa4_split_kernel")
    kern.KERNELS = {k: "class-split" for k in P.SPLIT_KERNELS}
    monkeypatch.setitem(sys.modules, "xstage.hw.attention.fa4_split_kernel", kern)
    monkeypatch.setattr(P, "_workspace", lambda: types.SimpleNamespace(data_ptr=lambda: 0xbee0))
    q = types.SimpleNamespace(shape=(1, 16384, 3, 128))
    cls, sched, cache = P.forward_impl(fi._flash_attn_fwd, kernel="staggersplit", rank=1)(q, 0, q)
    assert (cls, sched, cache) == ("class-split", "split-bee0-1-8", {})  # the workspace address is compiled in
    assert m90.SingleTileScheduler == "single"
    assert P.split_workspace_bytes(132) == (132 * P.SPLIT_WORDS * P.SPLIT_THREADS + 1) * 4


def test_split_window_runs_through_partner_units_to_the_next_staging():
    whole, split, units, grid = P.split_plan(384, 132)  # M = 16K: 264 whole, 120 split, 504 units
    n = 128
    assert P.split_window(5, whole, units, grid, n) == n - 1  # next unit whole
    assert P.split_window(132 + 4, whole, units, grid, n) == 63 + 63  # even CTA: two partner halves follow
    assert P.split_window(132 + 5, whole, units, grid, n) == 63  # odd CTA: the owner half stages next
    assert P.split_window(132 + 110, whole, units, grid, n) == 63  # even CTA >= 108: one partner unit, then the end
    assert P.split_window(264 + 5, whole, units, grid, n) == 63  # the owner of pair 2 has one more owner unit
    assert P.split_window(396 + 5, whole, units, grid, n) == 0  # last unit: sent at the end of the kernel
    for u in range(units):  # never past the CTA's remaining interior steps
        rest = [v for v in range(u + grid, units, grid)]
        steps = sum(n - 1 if v < whole else (n + 1) // 2 - 1 if (v - whole) % 2 == 0 else n // 2 - 1 for v in rest)
        assert 0 <= P.split_window(u, whole, units, grid, n) <= steps
