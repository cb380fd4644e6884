"""The W-rank MoE path (sim/workloads/ep.py, hw/moe/dist.py): expert/token ownership, seed regeneration, Dispatch
plans, records, and the per-rank work under the Triton interpreter without torch.distributed.

The kernel cases run rank by rank in one process: every rank's destination table points at host
tensors standing in for the W symmetric buffers, so "every Combine row written exactly once, by its
expert's owner" is checked over all ranks, on the CPU.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xstage.errors import InputError
from xstage.compare import moe_records as R
from xstage.records import moe as RB
from xstage.sim.workloads.ep import EpProblem, a2a_plan, all_layouts, ep_layout, ep_routing, rank_counts, slot_writer
from xstage.sim.workloads.moe_layout import MoeProblem, check_layout, dispatch_layout
from xstage.records import COLUMNS, save_records
from xstage.sim.platform import load_platform
from xstage.sim.schedules import make_moe_schedule


def _problem(W=3, E=2, tokens=48, top_k=4, routing="skewed", seed=1, rank=0, **kw):
    return EpProblem(64, 32, tokens, local_experts=E, routing=routing, world_size=W, rank=rank, top_k=top_k,
                     seed=seed, block_m=16, block_n=32, **kw)


@settings(max_examples=40, deadline=None)
@given(W=st.integers(1, 5), E=st.integers(1, 4), top_k=st.integers(1, 6), per_rank=st.integers(1, 12),
       routing=st.sampled_from(["balanced", "skewed"]), seed=st.integers(0, 50))
def test_every_combine_row_has_exactly_one_writer(W, E, top_k, per_rank, routing, seed):
    p = _problem(W, E, per_rank * top_k, top_k, routing, seed)
    layouts = all_layouts(p)
    writer = slot_writer(p)
    slots = []
    for r, lay in enumerate(layouts):
        check_layout(lay)                                          # receive layout invariants, as on one GPU
        v = lay.valid
        mine = lay.dest_rank[v].astype(np.int64) * p.combine_rows + lay.dest_row[v]
        assert (writer[mine] == r).all()                           # rank r writes only its experts' rows
        assert np.array_equal(lay.tokens_per_expert, rank_counts(p)[r])
        assert np.array_equal(lay.src_index[v], mine // p.top_k)   # the token of each row
        slots.append(mine)
    slots = np.concatenate(slots)
    assert np.array_equal(np.sort(slots), np.arange(W * p.combine_rows))   # each row once, over all ranks
    assert sum(lay.combine_bytes()["local_bytes"] for lay in layouts) == int((writer.reshape(W, -1) ==
                                                                              np.arange(W)[:, None]).sum()) * 128


def test_routing_regenerates_from_the_seed_alone():
    p = _problem(W=4, E=2, tokens=64, top_k=4)
    e1, w1 = ep_routing(p)
    e2, w2 = ep_routing(p.for_rank(3))                             # any rank computes the same global routing
    assert np.array_equal(e1, e2) and np.array_equal(w1, w2)
    assert ((w1 >= 0.05) & (w1 < 1.0)).all()
    e3, _ = ep_routing(_problem(W=4, E=2, tokens=64, top_k=4, seed=2))
    assert not np.array_equal(e1, e3)
    a, b = ep_layout(p.for_rank(2)), ep_layout(p.for_rank(2))
    assert np.array_equal(a.dest_row, b.dest_row) and np.array_equal(a.weight, b.weight)


def test_rank0_receives_the_single_gpu_sweeps_counts():
    for routing in ("balanced", "skewed"):
        ep = EpProblem(7168, 2048, 16384, routing=routing, world_size=8)
        one = dispatch_layout(MoeProblem(7168, 2048, 16384, routing=routing, world_size=8))
        assert np.array_equal(ep_layout(ep).tokens_per_expert, one.tokens_per_expert)   # 8337 hot in skewed
        assert ep.combine_rows == 16384 and ep.tokens_per_rank == 2048


def test_tokens_meet_distinct_experts_when_counts_allow():
    p = EpProblem(7168, 2048, 8192, routing="skewed", world_size=8)          # hot expert: 4096 <= W*T = 8192
    assert rank_counts(p).max() <= p.world_size * p.tokens_per_rank
    experts = ep_routing(p)[0].reshape(-1, p.top_k)
    assert all(len(set(row)) == p.top_k for row in experts)
    one = EpProblem(2048, 512, 4096, routing="skewed", world_size=1)        # top-8 of 8, skewed: impossible
    assert any(len(set(row)) < one.top_k for row in ep_routing(one)[0].reshape(-1, one.top_k))


def test_labels_and_bad_inputs():
    p = EpProblem(7168, 2048, 8192, routing="skewed", precision="w8a8", world_size=8, rank=3)
    assert p.label() == "h7168-i2048-t8192-e8-skewed-w8a8-ep8-s0"
    assert p.for_rank(5).rank == 5 and p.for_rank(5).label() == p.label()
    with pytest.raises(InputError, match="tokens"):
        EpProblem(64, 32, 50, top_k=4, world_size=2, block_m=16, block_n=32)
    with pytest.raises(InputError, match="rank"):
        _problem(W=2, rank=2)
    with pytest.raises(InputError, match="EpProblem"):
        ep_layout(MoeProblem(64, 32, 48, block_m=16, block_n=32))


@settings(max_examples=25, deadline=None)
@given(W=st.integers(1, 4), E=st.integers(1, 3), per_rank=st.integers(1, 10), seed=st.integers(0, 20))
def test_a2a_plan_delivers_each_ranks_receive_layout(W, E, per_rank, seed):
    """all_to_all_single simulated in numpy: what arrives, placed at recv_at, is the regenerated Dispatch."""
    p = _problem(W, E, per_rank * 2, 2, "skewed", seed)
    layouts = all_layouts(p)
    plans = [a2a_plan(p.for_rank(r), layouts) for r in range(W)]
    T = p.tokens_per_rank
    for r, lay in enumerate(layouts):
        chunks = []
        for s, plan in enumerate(plans):                       # source s's chunk for r: token ids s*T + row
            off = np.concatenate([[0], np.cumsum(plan["send_counts"])])
            chunks.append(s * T + plan["send_rows"][off[r]:off[r + 1]])
        assert [len(c) for c in chunks] == plans[r]["recv_counts"]
        got = np.full(lay.recv_rows, -1, dtype=np.int64)
        got[plans[r]["recv_at"]] = np.concatenate(chunks)
        assert np.array_equal(got, lay.src_index)


def test_agreed_lead():
    from xstage.hw.moe.dist import agreed_lead

    assert agreed_lead([{1: 10.0, 2: 9.0}, {1: 10.0, 2: 12.0}]) == 1      # D = 2 is slower on rank 1
    assert agreed_lead([{1: 10.0, 2: 9.0}, {1: 11.0, 2: 10.5}]) == 2
    assert agreed_lead([{4: 5.0}, {2: 1.0}]) == 4                            # nothing in common: rank 0's best


# --- records ------------------------------------------------------------------------------------------
def _rank_rows(p: EpProblem, times: dict, sim: float) -> list:
    extra = {"lead_rows": 2, "num_sms": 8, "baseline": "torch._grouped_mm", "layout": "ep", "measured_l1(us)": 6.0,
             "measured_l2(us)": 3.0, "measured_l1_epilogue(us)": 0.5, "measured_l2_epilogue(us)": 1.0,
             "sim_wave(us)": sim * 1.1, "sim_int(us)": sim, "sim_platform": "test"}
    return [RB.kernel_row(p, v, [t * 0.99, t, t * 1.01], platform="h200-nvlink", **extra) for v, t in times.items()]


def test_rank_rows_summarize_as_the_slowest_rank(tmp_path):
    p = EpProblem(256, 128, 640, routing="skewed", world_size=2, seed=2)
    rows = _rank_rows(p.for_rank(0), {"expert_wave": 120.0, "interleaved": 100.0, "expert_wave_local": 80.0,
                                      "interleaved_local": 70.0, "grouped_mm": 56.0}, 100.0) \
        + _rank_rows(p.for_rank(1), {"expert_wave": 150.0, "interleaved": 140.0, "expert_wave_local": 90.0,
                                     "interleaved_local": 85.0, "grouped_mm": 60.0}, 130.0)
    frame = pd.DataFrame(rows)
    assert {"rank", "world_size", "layout", "platform"} <= set(frame.columns) and set(frame["rank"]) == {0, 1}
    one = R.collapse_ranks(frame)
    assert len(one) == 5 and one.loc[one["variant"] == "expert_wave", "time(us)"].item() == 150.0
    assert (one["sim_int(us)"] == 130.0).all()
    save_records(tmp_path / "moe-kernel.parquet", "kernel", frame, {"config": {}, "provenance": {}})
    s = R.summarize(tmp_path, "h200-nvlink")
    assert s["n_configs"] == 1
    assert s["geomean_speedup_interleaved"] == pytest.approx(150 / 140)
    assert s["gemm_tflops_vs_grouped_mm"] == pytest.approx(60 / 85)
    assert s["sign_agreement_with_sim"] == 1.0
    with pytest.raises(InputError):
        R.summarize(tmp_path, "h200-pcie-host")
    single = R.collapse_ranks(frame[frame["rank"] == 0])                      # one rank: unchanged
    assert single["time(us)"].tolist() == frame.loc[frame["rank"] == 0, "time(us)"].tolist()


def test_resimulate_rebuilds_the_ep_layout_per_rank():
    p = EpProblem(256, 128, 640, routing="skewed", world_size=2, seed=2)
    rows = [r for k in (0, 1) for r in _rank_rows(p.for_rank(k), {"expert_wave": 1.0, "interleaved": 1.0}, 1.0)]
    plat = load_platform("paper-b200")
    k = R.resimulate(pd.DataFrame(rows), plat, "paper-b200")
    t = {"l1_us": 6.0, "l2_us": 3.0, "l1_epilogue_us": 0.5, "l2_epilogue_us": 1.0}
    for rank in (0, 1):
        lay = ep_layout(p.for_rank(rank))
        want = R.simulate(lay, make_moe_schedule("expert_wave", lay.grid, 8), t, plat)
        assert k.loc[k["rank"] == rank, "sim_wave(us)"].iloc[0] == pytest.approx(want)
    assert k.loc[k["rank"] == 0, "sim_wave(us)"].iloc[0] != k.loc[k["rank"] == 1, "sim_wave(us)"].iloc[0]


# --- torch: destinations, NCCL-less Dispatch over gloo at W = 1 ----------------------------------------
def test_peers_view_and_gloo_dispatch_at_world_size_1():
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    import torch.distributed as dist

    from xstage.hw.moe import kernel as M
    from xstage.hw.moe.dist import Comm, Peers
    from xstage.hw.moe.ep_inputs import all_source_tokens, dispatch_a2a

    pool = Peers.local(torch.zeros(1000, dtype=torch.bfloat16))
    v = pool.view(10, 64)
    assert v.buffer.shape == (10, 64) and v.pointers == pool.pointers and v.buffer.data_ptr() == pool.pointers[0]
    v.poison()
    assert torch.isnan(pool.buffer[:640].float()).all() and not torch.isnan(pool.buffer[640:].float()).any()
    with pytest.raises(InputError):
        pool.view(20, 64)
    assert Comm().gather(3) == [3]
    p = _problem(W=1, E=3, tokens=40, top_k=2)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        x = dispatch_a2a(p, all_layouts(p), "cpu")
    finally:
        dist.destroy_process_group()
    assert torch.equal(x, M.dispatch(all_source_tokens(p, "cpu"), ep_layout(p)))


# --- the kernel, rank by rank, under the interpreter ---------------------------------------------------
INTERPRETED = r"""
import json, torch
from xstage.compare import moe_records as R
from xstage.hw.moe import bench as B
from xstage.hw.moe import kernel as M
from xstage.hw.moe.dist import Comm, Peers, check_rank, measure_rank, rank_setup
from xstage.hw.moe.ep_inputs import expected_combine
from xstage.sim.workloads.ep import EpProblem
assert M.interpreting()
res = {}
kw = {**B.DRY_KW, "block_k": 32}
def problem(W, prec="bf16", **k):
    return EpProblem(64, 64 if prec == "w8a8" else 32, 48, local_experts=3, routing="skewed", world_size=W, top_k=2,
                     seed=3, block_m=16, block_n=32, precision=prec, **k)
# W = 1 without torch.distributed: the table holds the own buffer only
p = problem(1)
res["w1"] = check_rank(p, 2, kw, Peers.local(torch.empty((p.combine_rows, p.hidden), dtype=torch.bfloat16)), Comm())
# W = 3 in one process: each rank's table points at the three stand-in buffers; ranks run one after another
for prec in ("bf16", "w8a8"):
    p = problem(3, prec)
    bufs = [torch.full((p.combine_rows, p.hidden), float("nan"), dtype=torch.bfloat16) for _ in range(3)]
    ptrs = [b.data_ptr() for b in bufs]
    table = torch.tensor(ptrs, dtype=torch.int64)
    count = torch.zeros((3, p.combine_rows, p.hidden // p.block_n), dtype=torch.int32)
    errors = []
    for r in range(3):
        s = rank_setup(p.for_rank(r), 2, Peers(bufs[r], table, ptrs))
        s.run("interleaved" if r % 2 else "expert_wave", True, kw, write_count=count)
        errors += [int(d.error.item()) for d in s.dev.values()]
    res[f"w3_{prec}"] = {"errors": errors, "count": sorted(set(count.flatten().tolist())),
                         "cmp": [M.compare(bufs[r].float(), expected_combine(p.for_rank(r), "cpu")) for r in range(3)],
                         "wrong": M.compare(bufs[0].float(), expected_combine(p.for_rank(1), "cpu"))}
# the timed path at W = 1 (fixed lead, one trial)
p = problem(1)
rows, checks = measure_rank(p, 2, kw, Peers.local(torch.empty((p.combine_rows, p.hidden), dtype=torch.bfloat16)),
                            Comm(), trials=1, dry=True, lead=1)
res["measure"] = {"variants": sorted(r["variant"] for r in rows), "checks": checks,
                  "cols": sorted(set(rows[0])), "platform": rows[0]["platform"], "layout": rows[0]["layout"]}
print("RESULT" + json.dumps(res, default=str))
"""


@pytest.fixture(scope="module")
def interpreted():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", INTERPRETED], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def test_world_size_1_checks_pass(interpreted):
    rows = interpreted["w1"]
    assert {r["variant"] for r in rows} == {"expert_wave", "interleaved", "expert_wave_local", "interleaved_local",
                                            "baseline_matmul_loop+combine_copy"}
    for r in rows:
        assert r["ok"] and r["error_flag"] == 0 and r["unwritten"] == 0, r
    assert all(r["written_once"] for r in rows if r["variant"] in ("expert_wave", "interleaved"))


@pytest.mark.parametrize("prec", ["bf16", "w8a8"])
def test_three_ranks_write_every_row_once_with_their_owners_values(interpreted, prec):
    r = interpreted[f"w3_{prec}"]
    assert r["errors"] == [0] * 6
    assert r["count"] == [1]                              # every (row, N tile) of every rank's buffer: one store
    assert all(c["ok"] and c["rel_err"] < 2e-2 for c in r["cmp"]), r["cmp"]
    assert not r["wrong"]["ok"]                           # the check can fail


def test_measure_rank_rows(interpreted):
    m = interpreted["measure"]
    assert m["variants"] == sorted(["expert_wave", "interleaved", "expert_wave_local", "interleaved_local",
                                    "grouped_mm", "baseline_ffn", "combine_copy", "baseline_total"])
    assert all(c["ok"] for c in m["checks"]) and len(m["checks"]) == 2
    assert set(COLUMNS["kernel"]) <= set(m["cols"])
    assert {"rank", "world_size", "time(us)", "lead_rows", "combine_copy(GBps)"} <= set(m["cols"])
    assert not any(c.startswith("sim_") for c in m["cols"])   # the bench records; compare replays the simulator
    assert m["platform"] == "h200-nvlink" and m["layout"] == "ep"
