"""Dispatch, weights, quantization and the float32 references of the fused MoE kernels (torch only).

``dispatch`` gathers source tokens into the receive layout (a separate step, not part of the fused
kernel); ``pack_w1`` is the kernels' Linear-1 weight layout; ``reference_moe`` / ``reference_w8a8``
compute what the bf16 / W8A8 kernel must store, in receive order; ``compare`` is the norm-wise check.
W8A8: fp8 e4m3 with one float32 scale per row (``quantize_rows``, amax / 448).
"""

import numpy as np

from xstage.sim.workloads.moe_layout import DispatchLayout

FP8_MAX = 448.0


def dispatch(tokens, layout: DispatchLayout, out=None):
    """Dispatch's result on this GPU: gather source tokens ``[W * tokens_per_rank, H]`` into the receive
    layout ``[rows * BM, H]`` (padding rows zero). A separate step, not part of the fused kernel."""
    import torch

    if out is None:
        out = torch.zeros((layout.recv_rows, layout.problem.hidden), dtype=tokens.dtype, device=tokens.device)
    v = np.flatnonzero(layout.valid)
    idx = torch.as_tensor(layout.src_index[v], device=tokens.device)
    out[torch.as_tensor(v, device=tokens.device)] = tokens.index_select(0, idx)
    return out


def expert_rows(layout: DispatchLayout):
    """(local expert, slice of its receive rows) for every expert that received tokens."""
    p = layout.problem
    for e, (c, first) in enumerate(zip(layout.tokens_per_expert, layout.grid.first_row)):
        if c:
            yield e, slice(int(first) * p.block_m, int(first) * p.block_m + int(c))


def reference_moe(x_recv, w1, w2, layout: DispatchLayout):
    """float32 reference of the kernel's Combine rows, in receive order ``[rows*BM, H]`` (padding 0)."""
    import torch

    p = layout.problem
    out = torch.zeros((layout.recv_rows, p.hidden), dtype=torch.float32, device=x_recv.device)
    weight = torch.as_tensor(layout.weight, device=x_recv.device)
    for e, s in expert_rows(layout):
        h = x_recv[s].float() @ w1[e].float().T
        act = torch.nn.functional.silu(h[:, :p.intermediate]) * h[:, p.intermediate:]
        out[s] = (act @ w2[e].float().T) * weight[s, None]
    return out


def compare(out, ref, rtol: float = 2e-2) -> dict:
    """Norm-wise relative error of ``out`` against ``ref`` and the worst element; ok when <= rtol."""
    import torch

    out, ref = out.float(), ref.float().to(out.device)
    finite = bool(torch.isfinite(out).all())
    rel = float(torch.linalg.vector_norm(out - ref) / torch.linalg.vector_norm(ref)) if finite else float("inf")
    max_abs = float((out - ref).abs().max()) if finite and out.numel() else float("inf") if not finite else 0.0
    return {"rel_err": rel, "max_abs_err": max_abs, "ok": finite and rel <= rtol}


def pack_w1(w1):
    """The kernel's Linear-1 weight layout: [E, 2I, H] with gate row j at 2j and up row j at 2j + 1
    (from the usual [gate; up] = rows [0, I) and [I, 2I)). Done once per model, like any weight prepack."""
    E, two_i, H = w1.shape
    return w1.view(E, 2, two_i // 2, H).transpose(1, 2).reshape(E, two_i, H).contiguous()


def random_weights(problem, device, seed: int = 0, dtype=None):
    """Expert weights scaled so activations stay O(1): w1 [E, 2I, H], w2 [E, H, I]."""
    import torch

    dtype = dtype or torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(seed)
    p = problem
    w1 = torch.randn((p.local_experts, 2 * p.intermediate, p.hidden), device=device, generator=gen) / p.hidden ** 0.5
    w2 = torch.randn((p.local_experts, p.hidden, p.intermediate), device=device, generator=gen) / p.intermediate ** 0.5
    return w1.to(dtype).contiguous(), w2.to(dtype).contiguous()


def quantize_rows(t):
    """fp8 e4m3 of ``t [..., N, K]`` with one float32 scale per row (amax / 448): (t_q, scale [..., N])."""
    import torch

    t = t.float()
    s = t.abs().amax(dim=-1).clamp_min(1e-12) / FP8_MAX
    return (t / s[..., None]).to(torch.float8_e4m3fn).contiguous(), s.contiguous()


class W8A8Weights:
    """fp8 expert weights with per-output-channel scales; W1 in the kernel's packed (gate, up) order."""

    def __init__(self, w1, w2):
        self.w1_q, self.sw1 = quantize_rows(pack_w1(w1))
        self.w2_q, self.sw2 = quantize_rows(w2)


def quantize_activations(x_recv):
    """Dispatch's fp8 receive buffer and its per-token scales (padding rows stay 0)."""
    return quantize_rows(x_recv)


def reference_w8a8(x_q, sx, weights: W8A8Weights, layout):
    """float32 reference of the W8A8 kernel's Combine rows in receive order ``[rows*BM, H]``."""
    import torch

    p = layout.problem
    half = p.block_n // 2
    out = torch.zeros((layout.recv_rows, p.hidden), dtype=torch.float32, device=x_q.device)
    weight = torch.as_tensor(layout.weight, device=x_q.device)
    for e, s in expert_rows(layout):
        x = x_q[s].float() * sx[s, None]
        h = x @ (weights.w1_q[e].float() * weights.sw1[e, :, None]).T       # packed: gate 2j, up 2j + 1
        act = torch.nn.functional.silu(h[:, 0::2]) * h[:, 1::2]
        blocks = act.view(act.shape[0], -1, half)
        sa = blocks.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / FP8_MAX
        act = ((blocks / sa).to(torch.float8_e4m3fn).float() * sa).view_as(act)
        out[s] = (act @ (weights.w2_q[e].float() * weights.sw2[e, :, None]).T) * weight[s, None]
    return out
