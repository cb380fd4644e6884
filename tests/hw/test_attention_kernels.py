"""FlashAttention–A2A kernels against float32 SDPA: Triton interpreter on the CPU, the real thing on a GPU."""

import importlib
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from xstage.errors import InputError  # noqa: E402
from xstage.hw.attention.config import AttentionConfig  # noqa: E402

GPU = torch.cuda.is_available()


@pytest.fixture(scope="module")
def A():
    return importlib.import_module("xstage.hw.attention.kernel")


# The interpreter must be chosen before triton is first imported, so the CPU runs go to a subprocess.
INTERPRETED = r"""
import json, torch
from xstage.hw.attention import kernel as A
from xstage.hw.attention.config import AttentionConfig
assert A.interpreting()
res = {}
def qkv(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((cfg.seq_len, cfg.heads, cfg.head_dim), generator=g).to(torch.bfloat16) for _ in range(3)]
def fused_check(cfg, seed):  # fresh inputs, poisoned emulated destinations, one fused launch, then the check
    q, k, v = qkv(cfg, seed)
    d = A.Destinations.emulated(cfg.layout, "cpu")
    d.poison()
    A.launch_fa(q, k, v, cfg, dest_table=d.table)
    return d.check(A.reference_attention(q, k, v))
# 8 tiles over 3 persistent programs; rank 1 of 4: the self chunk is the second one
cfg = AttentionConfig(64, heads=2, head_dim=64, world_size=4, rank=1, block_m=16, block_n=16, num_warps=4,
                      num_stages=2, programs=3)
q, k, v = qkv(cfg, 0)
ref = A.reference_attention(q, k, v)
out = torch.full_like(q, float("nan"))
res["fa_returns_out"] = A.launch_fa(q, k, v, cfg, out=out) is out
res["fa"] = A.compare(out, ref)
d = A.Destinations.emulated(cfg.layout, "cpu")
d.poison()
res["poisoned"] = d.check(ref)
A.launch_fa(q, k, v, cfg, dest_table=d.table)
res["fused"] = d.check(ref)
res["rank2_rows"] = bool(torch.equal(d.buffers[2][:, 2:4].float(), out[32:48].float()))
d.poison()
A.launch_a2a(out, d.table, cfg)
res["serial"] = d.check(ref)
cfg = AttentionConfig(64, heads=1, head_dim=128, world_size=2, rank=0, block_m=32, block_n=32, num_warps=4,
                      num_stages=2)
res["fused_d128"] = fused_check(cfg, 3)
cfg = AttentionConfig(64, heads=2, head_dim=64, world_size=2, rank=1, block_m=16, block_n=32, num_warps=4,
                      num_stages=2, tma=True)
res["fused_tma"] = fused_check(cfg, 4)
import triton, triton.language as tl
@triton.jit
def probe(out, m_blocks, nb_local, rank, heads, N: tl.constexpr):
    for w in range(0, N):
        head, m_block = A._local_last(w, m_blocks, nb_local, rank, heads)
        tl.store(out + w, head * m_blocks + m_block)
orders = {}
for W, rank, H, M in ((4, 1, 2, 16), (8, 7, 3, 32), (1, 0, 2, 8), (2, 0, 1, 8)):
    lay = AttentionConfig(M * 16, heads=H, head_dim=64, world_size=W, rank=rank, block_m=16, block_n=16).layout
    got = torch.zeros(lay.num_tiles, dtype=torch.int32)
    probe[(1,)](got, lay.m_blocks, lay.chunk_rows // 16, rank, H, N=lay.num_tiles)
    orders[f"{W},{rank},{H},{M}"] = [got.tolist(), lay.work_order().tolist()]
res["orders"] = orders
cfg = AttentionConfig(64, heads=2, head_dim=64, world_size=4, rank=3, block_m=16, block_n=16, num_warps=4,
                      num_stages=2, programs=5, local_last=False)
res["fused_natural"] = fused_check(cfg, 5)
# drip: 2 programs x 2 tiles of 32 rows, 2 chunks of 16 rows each, one every 2 of the 8 K/V steps
cfg = AttentionConfig(128, heads=1, head_dim=128, world_size=2, rank=1, block_m=32, block_n=16, num_warps=4,
                      num_stages=2, programs=2, drip=True)
res["fused_drip"] = fused_check(cfg, 6)
# split tail: 4 tiles on 3 programs -> tile 4 runs as two K/V halves merged by the later one (twice: the
# arrival counter must be back at 0 after each launch); 5 programs -> every tile split; FA-only too
for name, kw in (("fused_split", dict(programs=3)), ("fused_split_drip", dict(programs=3, drip=True)),
                 ("fused_split_all", dict(programs=5, local_last=False)),
                 ("fused_stagger", dict(programs=2, stagger=True, split_tail=False)),
                 ("fused_split_stagger", dict(programs=3, stagger=True)),
                 ("fused_parts5_stagger", dict(programs=3, stagger=True, tail_parts=5)),
                 ("fused_bal", dict(programs=3, tail_parts=0))):
    cfg = AttentionConfig(128, heads=1, head_dim=128, world_size=2, rank=1, block_m=32, block_n=16, num_warps=4,
                          num_stages=2, **{"split_tail": True, **kw})
    q, k, v = qkv(cfg, 7)
    ref = A.reference_attention(q, k, v)
    d = A.Destinations.emulated(cfg.layout, "cpu")
    for rep in range(2):
        d.poison()
        A.launch_fa(q, k, v, cfg, dest_table=d.table)
        res[f"{name}{rep}"] = d.check(ref)
    out = torch.full_like(q, float("nan"))
    A.launch_fa(q, k, v, cfg, out=out)
    res[f"{name}_fa"] = A.compare(out, ref)
# 8 parts of 4 K/V steps on 5 programs, staggered: program 4 sends 4 steps after staging, so the tile it
# staged is not due within its part; it merges the tail tile (last to arrive) and sends the pending one first
cfg = AttentionConfig(512, heads=1, head_dim=64, world_size=2, rank=0, block_m=32, block_n=16, num_warps=4,
                      num_stages=2, programs=5, stagger=True, split_tail=True, tail_parts=8)
res["fused_parts8_pending"] = fused_check(cfg, 8)
res["tail_split"] = [list(AttentionConfig(128, heads=1, head_dim=128, world_size=2, block_m=32, block_n=16,
                                          split_tail=True, tail_parts=p).tail_split(3)) for p in (2, 5, 0)]
res["split_counters"] = [int(v[1].sum()) for key, v in A._STAGES.items() if key[0] == "split"]
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def interpreted():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", INTERPRETED], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _qkv(cfg, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn((cfg.seq_len, cfg.heads, cfg.head_dim), generator=gen).to(torch.bfloat16) for _ in range(3)]


@pytest.mark.skipif(GPU, reason="interpreter test (the GPU tests below cover the compiled kernels)")
def test_interpreted_fa_fused_and_serial_match_reference(interpreted):
    res = interpreted
    assert res["fa_returns_out"]
    assert res["fa"]["ok"] and res["fa"]["rel_err"] < 1e-2, res["fa"]
    assert res["poisoned"]["unwritten"] == 64 * 2 * 64 and not res["poisoned"]["ok"]  # the check sees poison
    names = ("fused_split", "fused_split_drip", "fused_split_all", "fused_stagger", "fused_split_stagger",
             "fused_parts5_stagger", "fused_bal")
    splits = [f"{n}{r}" for n in names for r in (0, 1)]
    for variant in ("fused", "serial", "fused_d128", "fused_tma", "fused_natural", "fused_drip", *splits,
                    "fused_parts8_pending"):
        r = res[variant]
        assert r["ok"] and r["unwritten"] == 0 and r["stray"] == 0 and r["rel_err"] < 1e-2, (variant, r)
    assert res["fused"]["rel_err"] == pytest.approx(res["fa"]["rel_err"])  # same tiles, other place
    assert res["rank2_rows"]  # rows 32..47 of local heads 0, 1 → rank 2, columns 2, 3
    for name in names:
        assert res[f"{name}_fa"]["ok"], (name, res[f"{name}_fa"])
    assert res["tail_split"] == [[3, 2], [3, 5], [3, 3]]  # 4 tiles on 3 programs: 3 whole, 1 in parts
    assert res["split_counters"] and res["split_counters"] == [0] * len(res["split_counters"])
    for key, (kernel_order, layout_order) in res["orders"].items():
        assert kernel_order == layout_order, key  # the kernel's _local_last is A2ALayout.work_order


def test_compare_flags_wrong_output(A):
    ref = torch.randn(8, 2, 4)
    assert A.compare(ref.clone(), ref)["ok"]
    assert not A.compare(ref * 1.05, ref)["ok"]
    bad = ref.clone()
    bad[0, 0, 0] = float("nan")
    assert not A.compare(bad, ref)["ok"]


@pytest.mark.parametrize("kwargs, field", [
    (dict(seq_len=1024, head_dim=96), "head_dim"),
    (dict(seq_len=1024, block_n=8), "block_n"),
    (dict(seq_len=1024, block_n=48), "block_n"),
    (dict(seq_len=1040, world_size=8), "seq_len"),         # not a multiple of block_n = 64
    (dict(seq_len=1024, world_size=3), "seq_len"),         # not divisible by the world size
    (dict(seq_len=1536, world_size=8), "block_m"),         # 128 does not divide M/W = 192
    (dict(seq_len=1024, world_size=8, rank=8), "rank"),
    (dict(seq_len=1024, block_m=100), "block_m"),
    (dict(seq_len=1024, heads=0), "heads"),
    (dict(seq_len=256, block_n=64, drip=True), "seq_len"),  # 4 K/V steps < 8 chunks of 16 rows
    (dict(seq_len=512, block_n=64, drip=True, split_tail=True), "seq_len"),  # half Q-loops: 4 steps < 8 chunks
    (dict(seq_len=64, world_size=2, block_m=32, block_n=64, split_tail=True), "seq_len"),  # one K/V step: no parts
    (dict(seq_len=512, block_n=64, split_tail=True, tail_parts=1), "tail_parts"),
    (dict(seq_len=512, block_n=64, split_tail=True, tail_parts=17), "tail_parts"),
    (dict(seq_len=512, block_n=64, split_tail=True, tail_parts=16), "seq_len"),  # 8 K/V steps < 16 parts
    (dict(seq_len=2048, block_n=64, split_tail=True, tail_parts=4, drip=True), "tail_parts"),
    (dict(seq_len=1024, store_cache=".xx"), "store_cache"),
    (dict(seq_len=1024, drip=True, stagger=True), "stagger"),
])
def test_bad_config_raises_input_error(kwargs, field):
    with pytest.raises(InputError) as err:
        AttentionConfig(**kwargs)
    assert err.value.field == field


def test_launch_rejects_bad_tensors(A):
    cfg = AttentionConfig(64, heads=1, head_dim=64, world_size=2, block_m=16, block_n=16)
    q, k, v = _qkv(cfg)
    out = torch.empty_like(q)
    with pytest.raises(InputError, match="q.dtype"):
        A.launch_fa(q.float(), k, v, cfg, out=out)
    with pytest.raises(InputError, match="k.shape"):
        A.launch_fa(q, k[:32], v, cfg, out=out)
    with pytest.raises(InputError, match="exactly one"):
        A.launch_fa(q, k, v, cfg)
    with pytest.raises(InputError, match="dest_table.shape"):
        A.launch_fa(q, k, v, cfg, dest_table=torch.zeros(3, dtype=torch.int64))


def test_compile_stats_are_kept_per_build(A, monkeypatch):
    # an instrumented launch compiles to another kernel: its registers must not stand in for the plain build's
    cfg = AttentionConfig(64, heads=1, head_dim=64, world_size=2, block_m=16, block_n=16)
    monkeypatch.setattr(A, "COMPILE_STATS", {(cfg.label(), False, "plain"): {"n_regs": 96, "n_spills": 0},
                                             (cfg.label(), False, "clocks"): {"n_regs": 128, "n_spills": 4}})
    assert A.compile_stats(cfg, False) == {"n_regs": 96, "n_spills": 0}
    assert A.compile_stats(cfg, False, "clocks") == {"n_regs": 128, "n_spills": 4}
    assert A.compile_stats(cfg, True) == {"n_regs": None, "n_spills": None}


# --- GPU ------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("shape", [(1024, 2, 64, 8, 0, 128, 64, 3, False), (2048, 3, 128, 8, 3, 128, 64, 3, False),
                                   (2048, 3, 128, 4, 1, 128, 128, 2, True), (2048, 2, 64, 8, 6, 128, 64, 3, True)])
def test_gpu_every_variant_matches_reference(shape):
    from xstage.hw.attention.checks import check_shape

    M, H, d, W, rank, bm, bn, st, tma = shape
    rows = check_shape(AttentionConfig(M, H, d, W, rank, bm, bn, num_stages=st, tma=tma), seed=M + d)
    variants = {r["variant"] for r in rows}
    assert {"fa", "fused", "serial", "fused_instr", "tile_log"} <= variants
    assert all(r["ok"] is not False for r in rows), rows


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_gpu_host_mapping_is_uva_identity():
    from xstage.hw.common.hostmap import check_mapping

    assert check_mapping()["uva_identity"]
