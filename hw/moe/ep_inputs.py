"""The inputs of an expert-parallel MoE run that every rank can regenerate from seeds (torch only).

Rank r's source tokens, rank r's experts' weights, Dispatch over NCCL (``dispatch_a2a``: one
``all_to_all_single`` of the routed rows, ``xstage.sim.workloads.ep.a2a_plan``), and what each rank's
Combine buffer must hold (``expected_combine``: every owner's float32 reference of the rows it sends
there). The W-rank bench (``dist.py``) checks its kernels against them.
"""

import numpy as np

from xstage.hw.moe.refs import (W8A8Weights, dispatch, quantize_activations, random_weights, reference_moe,
                                reference_w8a8)
from xstage.sim.workloads.ep import EpProblem, a2a_plan, ep_layout


def _seed(p: EpProblem, kind: int, rank: int) -> int:
    return ((p.seed * 2 + kind) << 20) + rank


def source_tokens(p: EpProblem, source: int, device):
    """Rank ``source``'s T source tokens [T, H] bf16 (seeded)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(_seed(p, 0, source))
    return torch.randn((p.tokens_per_rank, p.hidden), device=device, generator=gen).to(torch.bfloat16)


def all_source_tokens(p: EpProblem, device):
    """Every rank's tokens, flat [W*T, H] (``DispatchLayout.src_index`` order)."""
    import torch

    return torch.cat([source_tokens(p, s, device) for s in range(p.world_size)])


def expert_weights(p: EpProblem, owner: int, device):
    """(w1, w2) of rank ``owner``'s local experts (seeded)."""
    return random_weights(p, device, seed=_seed(p, 1, owner))


def dispatch_a2a(p: EpProblem, layouts: list, device):
    """Dispatch over NCCL: one all_to_all_single of the routed token rows; the receive layout of ``p.rank``."""
    import torch
    import torch.distributed as dist

    plan = a2a_plan(p, layouts)
    own = source_tokens(p, p.rank, device)
    send = own.index_select(0, torch.as_tensor(plan["send_rows"], device=device)).contiguous()
    recv = torch.empty((sum(plan["recv_counts"]), p.hidden), dtype=own.dtype, device=device)
    dist.all_to_all_single(recv, send, output_split_sizes=plan["recv_counts"], input_split_sizes=plan["send_counts"])
    x = torch.zeros((layouts[p.rank].recv_rows, p.hidden), dtype=own.dtype, device=device)
    x[torch.as_tensor(plan["recv_at"], device=device)] = recv
    return x


def expected_combine(p: EpProblem, device):
    """float32 [T*top_k, H]: what rank ``p.rank``'s Combine buffer must hold, from every owner's reference."""
    import torch

    tokens = all_source_tokens(p, device)
    out = torch.full((p.combine_rows, p.hidden), float("nan"), dtype=torch.float32, device=device)
    for owner in range(p.world_size):
        q = p.for_rank(owner)
        lay = ep_layout(q)
        x = dispatch(tokens, lay)
        w1, w2 = expert_weights(q, owner, device)
        if p.precision == "w8a8":
            xq, sx = quantize_activations(x)
            ref = reference_w8a8(xq, sx, W8A8Weights(w1, w2), lay)
        else:
            ref = reference_moe(x, w1, w2, lay)
        sel = np.flatnonzero(lay.dest_rank == p.rank)
        out[torch.as_tensor(lay.dest_row[sel].astype(np.int64), device=device)] = ref[torch.as_tensor(sel, device=device)]
    return out
