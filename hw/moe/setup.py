"""One MoE problem set up on this device for the benches: layout, inputs, weights, schedules, Combine.

``Setup`` holds the tensors of one problem (Dispatch's receive buffer, expert weights, the W8A8
quantized copies), the two schedules (expert-wave and interleaved with lead D; sequential under the
interpreter, which runs programs one by one), their device tile arrays and the remote and local
Combine destinations; ``run`` launches one schedule's kernel. ``tune_lead`` picks D by the time with
local stores. The kernels (triton) are imported inside ``Setup.run``.
"""


import numpy as np

from xstage.hw.common.timing import device, time_variants
from xstage.hw.moe.buffers import Combine, DeviceLayout
from xstage.hw.moe.refs import (W8A8Weights, dispatch, pack_w1, quantize_activations, random_weights, reference_moe,
                                reference_w8a8)
from xstage.sim.model import lead_knee_rows
from xstage.sim.schedules import make_moe_schedule
from xstage.sim.workloads.moe_layout import MoeProblem, check_layout, dispatch_layout, sequential_schedule
from xstage.hw.common.log import hw_log


def num_sms(dry: bool) -> int:
    import torch

    if dry or device() == "cpu":
        return 2
    n = torch.cuda.get_device_properties(0).multi_processor_count
    return n - n % 2


class Setup:
    """Tensors, layouts and schedules of one problem on this device."""

    def __init__(self, problem: MoeProblem, sms: int, seed: int, lead: int | None = None, *, layout=None,
                 x_recv=None, weights=None, combine=None, group_rows: int = 1, balance: bool = False):
        """``group_rows``: rows both schedules walk side by side (``xstage.sim.schedules.pair_order``);
        ``balance``: the L1 and L2 deals' remainders on different CTA pairs (``xstage.sim.schedules._merge``).
        ``layout``, ``x_recv`` (Dispatch's result), ``weights`` (w1, w2) and ``combine`` (the remote
        destinations: anything with ``table``, ``pointers``, ``buffers``, ``poison``) replace the emulated
        ones when given (the W-rank path, ``xstage.hw.moe.dist``)."""
        import torch

        dev = device()
        self.problem = p = problem
        self.layout = lay = layout if layout is not None else dispatch_layout(problem)
        check_layout(lay)
        if x_recv is None:
            gen = torch.Generator(device=dev).manual_seed(seed)
            tokens = torch.randn((p.world_size * p.tokens_per_rank, p.hidden), device=dev, generator=gen)
            x_recv = dispatch(tokens.to(torch.bfloat16), lay)
        self.x = x_recv
        self.w1, self.w2 = weights if weights is not None else random_weights(p, dev, seed=seed + 7)
        self.w1_packed = pack_w1(self.w1)
        self.act = torch.empty((lay.recv_rows, p.intermediate), dtype=torch.bfloat16, device=dev)
        self.w8a8 = p.precision == "w8a8"
        if self.w8a8:
            self.wq = W8A8Weights(self.w1, self.w2)
            self.xq, self.sx = quantize_activations(self.x)
            self.act_q = torch.empty((lay.recv_rows, p.intermediate), dtype=torch.float8_e4m3fn, device=dev)
            self.sact = torch.zeros((lay.recv_rows, 2 * p.intermediate // p.block_n), dtype=torch.float32, device=dev)
        self.sms = sms
        self.group_rows = group_rows
        self.balance = bool(balance)
        self.knee = max(1, lead_knee_rows(p.block_n, sms, p.intermediate))
        self.lead = lead if lead is not None else self.knee
        self.schedules = {"expert_wave": make_moe_schedule("expert_wave", lay.grid, sms, group_rows=group_rows,
                                                           balance=self.balance),
                          "interleaved": make_moe_schedule("interleaved", lay.grid, sms, lead_rows=self.lead,
                                                           group_rows=group_rows, balance=self.balance)}
        if dev == "cpu":  # the interpreter runs programs one by one: one program, dependencies first
            self.schedules = {k: sequential_schedule(s) for k, s in self.schedules.items()}
        self.dev = {k: DeviceLayout(lay, s.to_arrays(), dev) for k, s in self.schedules.items()}
        self.combine = {True: combine if combine is not None else Combine(lay, dev, remote=True),
                        False: Combine(lay, dev, remote=False)}
        valid = np.flatnonzero(lay.valid)
        self.valid_idx = torch.as_tensor(valid, device=dev)
        self.packed_rank = torch.as_tensor(lay.dest_rank[valid], device=dev)
        self.packed_row = torch.as_tensor(lay.dest_row[valid], device=dev)
        self.packed_weight = torch.as_tensor(lay.weight[valid], device=dev)
        self.xp = self.x.index_select(0, self.valid_idx)
        self.offs = torch.as_tensor(np.cumsum(lay.tokens_per_expert), dtype=torch.int32, device=dev)

    def run(self, schedule: str, remote: bool, kw: dict, **extra):
        """One launch of ``schedule``'s kernel (this problem's precision) into the remote or local Combine."""
        from xstage.hw.moe import kernel as M
        from xstage.hw.moe import w8a8 as Q

        if self.w8a8:
            Q.launch_moe_w8a8(self.xq, self.sx, self.wq, self.act_q, self.sact, self.dev[schedule],
                              self.combine[remote], **kw, **extra)
        elif kw.get("flat"):
            self.run_flat(schedule, remote, kw, **extra)
        elif kw.get("gluon"):  # the warp-specialised Gluon kernel (hw/moe/gluon.py), its options gluon_*
            from xstage.hw.moe.gluon_launch import run_options, launch_moe_gluon
            launch_moe_gluon(self.x, self.w1_packed, self.w2, self.act, self.dev[schedule], self.combine[remote],
                             **run_options(kw), **extra)
        else:
            M.launch_moe(self.x, self.w1_packed, self.w2, self.act, self.dev[schedule], self.combine[remote], **kw,
                         **extra)

    def run_flat(self, schedule: str, remote: bool, kw: dict, **extra):
        """``run`` with ``kw["flat"]``: the flattened bf16 kernel (``flat.py``) on x and the activations side by
        side and the chunk-major weights (built once, beside the ones the other kernels read)."""
        from xstage.hw.moe import flat as F
        from xstage.hw.moe.flat_steps import chunk_k, chunked_weights, side_by_side

        block_k = int(kw.get("block_k", 64))
        chunk = chunk_k(self.problem.hidden, self.problem.intermediate, block_k)
        if getattr(self, "_flat_inputs", (None,))[0] != chunk:
            xa, _ = side_by_side(self.x, self.problem.intermediate)
            self._flat_inputs = (chunk, xa, chunked_weights(self.w1_packed, self.w2, chunk))
        _, xa, wc = self._flat_inputs
        opts = {k: kw[k] for k in ("num_warps", "num_stages", "maxnreg") if k in kw}
        F.launch_moe_flat(xa, wc, self.dev[schedule], self.combine[remote], block_k=block_k, **opts, **extra,
                          interpreted=F.interpreting())

    def reference(self):
        if self.w8a8:
            return reference_w8a8(self.xq, self.sx, self.wq, self.layout)
        return reference_moe(self.x, self.w1, self.w2, self.layout)


def lead_schedule(s: Setup, lead: int) -> tuple:
    """(schedule, DeviceLayout) of the interleaved order with lead ``lead`` for ``s`` (sequential on the CPU)."""
    sched = make_moe_schedule("interleaved", s.layout.grid, s.sms, lead_rows=lead, group_rows=s.group_rows,
                              balance=s.balance)
    if device() == "cpu":
        sched = sequential_schedule(sched)
    return sched, DeviceLayout(s.layout, sched.to_arrays(), device())


def tune_lead(s: Setup, kw: dict, dry: bool, trials: int = 10, pick=None) -> dict:
    """Pick the interleaved lead D among D_knee x {1, 2, 4, 8} (capped at the rows) by the time with
    local stores (starvation is a compute-side effect, Eq. 16); installs it in ``s``. {D: us}.

    ``pick({D: us}) -> D`` chooses (default: the fastest; the W-rank path agrees on one D over ranks)."""
    rows = s.layout.grid.rows
    leads = sorted({min(max(1, s.knee * f), max(1, rows - 1)) for f in (1, 2, 4, 8)})
    if dry:
        leads = leads[:2]
    built = {d: lead_schedule(s, d) for d in leads}

    def run(d):
        s.dev["interleaved"] = built[d][1]
        s.run("interleaved", False, kw)

    times, _ = time_variants({d: (lambda d=d: run(d)) for d in leads}, trials=trials,
                             **({"warmup": 0, "rounds": 1} if dry else {"warmup": 2, "rounds": 2}))
    med = {int(d): float(np.median(t)) for d, t in times.items()}
    best = pick(med) if pick is not None else min(med, key=med.get)
    s.lead, (s.schedules["interleaved"], s.dev["interleaved"]) = best, built.get(best) or lead_schedule(s, best)
    hw_log(f"  lead D (knee {s.knee}): " + ", ".join(f"{d}: {t:.0f} us" for d, t in med.items()) + f" -> {best}")
    return med
