"""Correctness of the fused MoE kernels before anything is timed (``check_problem``) and the bounded
spin's bail-out (``check_deadlock_bails``): fresh random tokens, weights and routings against a float32
reference, Combine buffers poisoned before every run, a per-(row, N tile) write counter that must read
exactly 1, the l2_full error flag 0; a D = 0 schedule must trip the bounded spin and set it.
"""

import time

from xstage.hw.common.timing import device, sync
from xstage.hw.moe.baseline import baseline_ffn, grouped_mm_fn
from xstage.hw.moe.buffers import DeviceLayout
from xstage.hw.moe.setup import Setup
from xstage.records.moe import SCHEDULES
from xstage.sim.schedules import make_moe_schedule
from xstage.sim.workloads.moe_layout import MoeProblem


def check_problem(problem: MoeProblem, sms: int, kw: dict, seed: int, group_rows: int = 1, balance: bool = False) -> list:
    """Both schedules (``group_rows`` rows side by side) with remote and local stores on fresh inputs
    (poisoned Combine, write counter, error flag), and for bf16 the baseline with its separate Combine copy."""
    import torch

    from xstage.hw.moe import kernel as M

    s = Setup(problem, sms, seed, group_rows=group_rows, balance=balance)
    ref = s.reference()
    p = problem
    rows = []
    count = torch.zeros((p.world_size, p.combine_rows, p.hidden // p.block_n), dtype=torch.int32, device=device())
    for sched in SCHEDULES:
        for remote in (True, False):
            comb = s.combine[remote]
            comb.poison()
            count.zero_()
            s.dev[sched].error.zero_()
            s.run(sched, remote, kw, write_count=count)
            sync()
            res = comb.check(ref)
            valid = torch.as_tensor(s.layout.valid, device=device())
            c = count.flatten()
            written = int((c > 0).sum())
            once = bool((c <= 1).all()) and written == int(valid.sum()) * (p.hidden // p.block_n)
            err = int(s.dev[sched].error.item())
            rows.append({"config": p.label(), "variant": sched + ("" if remote else "_local"), **res,
                         "written_once": once, "error_flag": err, "lead_rows": s.lead,
                         "ok": res["ok"] and once and err == 0})
    if s.w8a8:
        return rows
    gemm, name = grouped_mm_fn(s)
    y = baseline_ffn(s, gemm)
    comb = s.combine[True]
    comb.poison()
    M.launch_combine_copy(y, s.packed_rank, s.packed_row, comb, block_n=p.block_n)
    sync()
    rows.append({"config": p.label(), "variant": f"baseline_{name}+combine_copy", **comb.check(ref)})
    return rows


def check_deadlock_bails(problem: MoeProblem, sms: int, kw: dict) -> dict:
    """A D = 0 interleaved schedule deadlocks by construction: the bounded spin must set the flag."""
    from xstage.hw.moe import kernel as M

    s = Setup(problem, sms, seed=3)
    sched = make_moe_schedule("interleaved", s.layout.grid, sms, lead_rows=0)
    dev = DeviceLayout(s.layout, sched.to_arrays(), device())
    t0 = time.time()
    M.launch_moe(s.x, s.w1_packed, s.w2, s.act, dev, s.combine[False], **kw, spin_limit=2000)
    sync()
    flag = int(dev.error.item())
    return {"config": problem.label(), "variant": "lead0_bails", "error_flag": flag, "wall_s": time.time() - t0,
            "ok": flag == 1}
