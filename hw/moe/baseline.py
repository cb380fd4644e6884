"""The user's MoE baseline the fused kernel is timed against: grouped GEMMs + SwiGLU, then a separate Combine.

bf16: ``torch._grouped_mm`` twice (or a per-expert matmul loop where it is missing or disagrees);
W8A8: ``torch._scaled_grouped_mm`` with the kernel's quantization (row-wise activation scales,
per-channel weight scales), where it runs. Each is checked against float32 math before it is timed.
"""


import numpy as np

from xstage.hw.common.timing import device, sync
from xstage.hw.moe.refs import quantize_rows
from xstage.hw.moe.setup import Setup
from xstage.hw.common.log import hw_log


def grouped_mm_fn(s: Setup):
    """(gemm(a, w) over experts, name): torch._grouped_mm when it runs here, else a matmul loop."""
    import torch

    counts = s.layout.tokens_per_expert
    bounds = np.concatenate([[0], np.cumsum(counts)])

    def loop(a, w):  # w: [E, N, K]
        return torch.cat([a[bounds[e]:bounds[e + 1]] @ w[e].T for e in range(len(counts))])

    if device() == "cuda" and hasattr(torch, "_grouped_mm"):
        try:
            def gmm(a, w):
                return torch._grouped_mm(a, w.transpose(-2, -1), offs=s.offs)
            y = gmm(s.xp[:, :], s.w1)
            ref = loop(s.xp, s.w1)
            sync()
            if float((y.float() - ref.float()).norm() / ref.float().norm()) < 1e-2:
                return gmm, "torch._grouped_mm"
            hw_log("  torch._grouped_mm disagrees with matmul; using the loop")
        except Exception as err:  # noqa: BLE001 - any failure: fall back and say so
            hw_log(f"  torch._grouped_mm unavailable ({type(err).__name__}: {str(err)[:120]})")
    return loop, "matmul_loop"


def scaled_grouped_mm_fns(s: Setup):
    """The W8A8 user's baseline, or None where it does not run: ``torch._scaled_grouped_mm`` (fp8 e4m3,
    row-wise activation scales, per-channel weight scales — the kernel's quantization) for Linear-1,
    SwiGLU and a row-wise fp8 quantization of the activations, then Linear-2 and the router weights.
    Returns ({"grouped_mm": the two GEMMs on fixed fp8 inputs}, the whole FFN, name); checked against
    the same math in float32 first."""
    import torch

    if device() != "cuda" or not hasattr(torch, "_scaled_grouped_mm"):
        return None
    xq = s.xq.index_select(0, s.valid_idx)
    sx = s.sx.index_select(0, s.valid_idx).contiguous()
    w1t, w2t = s.wq.w1_q.transpose(-2, -1), s.wq.w2_q.transpose(-2, -1)  # (E, K, N) column-major views

    def gemm(a, sa, wt, sw):
        return torch._scaled_grouped_mm(a, wt, sa, sw, offs=s.offs, out_dtype=torch.bfloat16)

    def ffn():
        h = gemm(xq, sx, w1t, s.wq.sw1)
        act_q, sact = quantize_rows(torch.nn.functional.silu(h[:, 0::2].float()) * h[:, 1::2].float())
        return gemm(act_q, sact, w2t, s.wq.sw2) * s.packed_weight[:, None]

    try:
        h = gemm(xq, sx, w1t, s.wq.sw1)
        ref = torch.cat([(xq[a:b].float() * sx[a:b, None]) @ (s.wq.w1_q[e].float() * s.wq.sw1[e, :, None]).T
                         for e, (a, b) in enumerate(zip([0, *s.offs.tolist()[:-1]], s.offs.tolist()))])
        sync()
        err = float((h.float() - ref).norm() / ref.norm())
        if err > 2e-2:
            hw_log(f"  torch._scaled_grouped_mm disagrees with float32 (rel err {err:.3g}); no fp8 baseline")
            return None
        act_q, sact = quantize_rows(torch.nn.functional.silu(h[:, 0::2].float()) * h[:, 1::2].float())
        ffn()
        sync()
    except Exception as err:  # noqa: BLE001 - any failure: no fp8 baseline, and say so
        hw_log(f"  torch._scaled_grouped_mm unavailable ({type(err).__name__}: {str(err)[:160]})")
        return None
    del ref
    return (lambda: (gemm(xq, sx, w1t, s.wq.sw1), gemm(act_q, sact, w2t, s.wq.sw2))), ffn, "torch._scaled_grouped_mm"


def baseline_ffn(s: Setup, gemm):
    import torch

    I = s.problem.intermediate
    h = gemm(s.xp, s.w1)
    a = torch.nn.functional.silu(h[:, :I]) * h[:, I:]
    return (gemm(a, s.w2).float() * s.packed_weight[:, None]).to(s.x.dtype)


def quack_grouped_fn(s: Setup, gemm, act, tuned: bool = False):
    """(quack's two grouped GEMMs on the inputs of the ``grouped_mm`` variant, or None; a check record).

    quack-kernels' ``quack.gemm_interface.gemm`` (variable-length M per expert through ``cu_seqlens_m``, B as
    (E, K, N)); ``tuned``: its autotuner. Checked against ``gemm`` (torch._grouped_mm) on both GEMMs first
    (relative Frobenius error < 1e-2); where quack is missing nothing is timed and the record says why."""
    import torch

    rec = {"config": s.problem.label(), "variant": "quack_vs_grouped_mm", "tuned": bool(tuned)}
    try:
        from quack.gemm_interface import gemm as quack_gemm
    except ImportError as err:
        return None, {**rec, "ok": True, "skipped": f"quack not importable ({err})"}
    try:
        cu = torch.cat([torch.zeros(1, dtype=torch.int32, device=s.offs.device), s.offs.to(torch.int32)])
        w1t, w2t = s.w1.transpose(-2, -1), s.w2.transpose(-2, -1)

        def fn():
            return (quack_gemm(s.xp, w1t, cu_seqlens_m=cu, tuned=tuned),
                    quack_gemm(act, w2t, cu_seqlens_m=cu, tuned=tuned))

        a, b = fn()
        errs = [float((m.float() - r.float()).norm() / r.float().norm()) for m, r in ((a, gemm(s.xp, s.w1)),
                                                                                     (b, gemm(act, s.w2)))]
        sync()
    except Exception as err:  # noqa: BLE001 - quack failing here: no quack variant, and say so
        return None, {**rec, "ok": False, "error": f"{type(err).__name__}: {str(err)[:200]}"}
    ok = max(errs) < 1e-2
    return (fn if ok else None), {**rec, "ok": ok, "rel_err": max(errs)}
