"""The fused MoE FFN at expert parallelism over W GPUs: one process per GPU, Combine into symmetric memory.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    torchrun --standalone --nproc-per-node W -m xstage.hw.moe.dist --out $OUT/moe-dist   # W = 1 runs too

(``benchmarks/gpu/moe_dist.sh``; inputs regenerated from seeds: ``ep_inputs.py``). Rank r owns the global experts [r*E, (r+1)*E) and T = tokens / top_k
source tokens; routing (``xstage.sim.workloads.ep``), tokens and weights all come from seeds, so any rank can
regenerate any other rank's. The kernel is the one-GPU kernel (``xstage.hw.moe.kernel`` / ``moe_w8a8``)
unchanged: only its destination table differs.

- **Combine**: one torch symmetric-memory buffer per rank (``xstage.hw.common.symm``), allocated once for the
  largest configuration; each configuration uses its first T*top_k x H bf16 elements, so the table
  of the W peer base addresses stays valid. A row is written once, by the owner of its expert.
- **Dispatch** (a separate step, not timed): ``--dispatch a2a`` (default) sends the routed token rows
  with one NCCL ``all_to_all_single`` (each rank generates only its own tokens, sends each destination
  its rows in that rank's receive order, and places what arrives: ``moe_ep.a2a_plan``); ``--dispatch
  regen`` makes every rank regenerate all source tokens from their seeds and gather its rows
  (``moe.dispatch``), no communication. Both give the identical receive layout; the references are
  always computed from regenerated inputs, so a Dispatch fault fails the checks.
- **Checks** per rank: own buffer poisoned (NaN), barrier, kernel, barrier; every row must be written
  and equal the float32 reference of its owner (``moe.reference_moe`` / ``moe_w8a8.reference_w8a8``,
  rel. error <= 2e-2 as on one GPU); a per-(row, N tile) write count summed over all ranks must be 1
  everywhere; the l2_full error flag 0. Also the local-store variant and the baseline's Combine copy.
- **Timing** per rank (``attention_bench.time_variants``: CUDA graph replays, CUDA events on the rank's
  stream, warm-up, 4 rounds in rotated order, median of ``--trials``; every rank waits at a barrier before
  each batch of trials, outside the events, so all ranks time the same variant at once): expert-wave and interleaved with
  remote stores, the same with local stores (W device buffers), ``torch._grouped_mm`` baseline and
  a Combine copy kernel through the symmetric pointers (``moe_bench.variant_fns``). Rank 0 gathers all
  ranks' kernel rows (schema of ``moe_records``, ``layout == "ep"``, platform h200-nvlink) into
  ``--out``/moe-kernel.parquet, so ``xstage results moe --data OUT`` and ``xstage compare`` read them
(and replay the simulator on the ``measured_*`` medians). Flags: ``xstage.cli.bench_moe_dist``.

The per-rank work takes its destinations (``Peers``) and its link to the other ranks (``Comm``) as
arguments, so it runs without torch.distributed at W = 1 (and, rank by rank, under TRITON_INTERPRET=1).
"""


import json
import sys
import time
import traceback
from pathlib import Path

from xstage.hw.common.timing import capture, device, sync, time_variants
from xstage.hw.moe.baseline import baseline_ffn, grouped_mm_fn
from xstage.hw.moe.bench import W8A8_KW, kernel_rows, tile_records, variant_fns
from xstage.hw.moe.ep_inputs import all_source_tokens, dispatch_a2a, expected_combine, expert_weights
from xstage.hw.moe.refs import compare
from xstage.hw.moe.refs import dispatch as dispatch_rows
from xstage.hw.moe.setup import Setup, num_sms, tune_lead
from xstage.records.moe import SCHEDULES, measured_columns
from xstage.sim.workloads.ep import EpProblem, all_layouts, ep_layout
from xstage.hw.common.log import hw_log

PLATFORM = "h200-nvlink"
_SHAPES = ((2048, 4096, 8192), (4096, 8192, 8192), (7168, 2048, 8192), (2048, 512, 4096), (4096, 1024, 8192),
           (7168, 512, 8192), (7168, 2048, 16384))
# the single-GPU sweep's shapes (moe_bench.SWEEP) per rank; W8A8 early enough that the budget keeps it
SWEEP = [(h, i, t, r, "bf16") for (h, i, t) in _SHAPES[:3] for r in ("balanced", "skewed")] \
    + [(h, i, t, r, "w8a8") for (h, i, t) in ((2048, 4096, 8192), (7168, 2048, 8192)) for r in ("balanced", "skewed")] \
    + [(h, i, t, r, "bf16") for (h, i, t) in _SHAPES[3:] for r in ("balanced", "skewed")]
SMALL_SWEEP = [(2048, 512, 4096, "balanced", "bf16"), (2048, 512, 4096, "skewed", "bf16"),
               (2048, 1024, 4096, "skewed", "w8a8")]
CHECKS = [(2048, 512, 1000, "balanced", "bf16"), (4096, 1024, 2000, "skewed", "bf16"),
          (2048, 1024, 2000, "skewed", "w8a8")]
KERNEL_KW = {"block_k": 64, "num_stages": 4, "num_warps": 8, "tma": True}   # the single-GPU tuner's pick (run 3)


# --- destinations and the link to the other ranks --------------------------------------------------
class Peers:
    """A rank's Combine destinations as the kernels take them (duck-types ``moe.Combine``): ``table`` (int64
    device tensor of the W base addresses), ``pointers``, ``buffers`` = [this rank's buffer]."""

    def __init__(self, buffer, table, pointers):
        self.buffers, self.table, self.pointers = [buffer], table, [int(x) for x in pointers]

    @property
    def buffer(self):
        return self.buffers[0]

    @classmethod
    def local(cls, buffer):
        """W = 1 without torch.distributed: the table holds the own buffer only."""
        import torch

        return cls(buffer, torch.tensor([buffer.data_ptr()], dtype=torch.int64, device=buffer.device),
                   [buffer.data_ptr()])

    def view(self, rows: int, hidden: int) -> "Peers":
        """The first rows x hidden elements (same offset, so the same table, on every rank)."""
        flat = self.buffer.view(-1)
        if rows * hidden > flat.numel():
            from xstage.errors import InputError
            raise InputError("combine rows", (rows, hidden), f"must fit the {flat.numel()}-element buffer")
        return Peers(flat[:rows * hidden].view(rows, hidden), self.table, self.pointers)

    def poison(self) -> None:
        self.buffer.fill_(float("nan"))


class Comm:
    """What the per-rank work needs from the other ranks; ``handle`` None: W = 1 without torch.distributed."""

    def __init__(self, handle=None):
        self.handle = handle

    def barrier(self) -> None:
        """Device-side barrier on the current stream (symmetric-memory signal pads)."""
        if self.handle is not None:
            self.handle.barrier()

    def sync(self) -> None:
        """Host and device: everything this rank queued is done, and so is every other rank's."""
        sync()
        self.barrier()
        sync()

    def all_reduce_(self, t) -> None:
        if self.handle is not None:
            import torch.distributed as dist
            dist.all_reduce(t)

    def gather(self, obj) -> list:
        if self.handle is None:
            return [obj]
        import torch.distributed as dist
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out


def agreed_lead(meds: list) -> int:
    """One lead D for all ranks from each rank's {D: local-store us}: the D whose slowest rank is fastest
    (among the D every rank timed; else rank 0's fastest)."""
    common = set.intersection(*(set(m) for m in meds))
    if not common:
        return min(meds[0], key=meds[0].get)
    return min(sorted(common), key=lambda d: max(m[d] for m in meds))


# --- per-rank work --------------------------------------------------------------------------------
def rank_setup(p: EpProblem, sms: int, dests: Peers, dispatch: str = "regen", lead: int | None = None) -> Setup:
    """``setup.Setup`` of rank ``p.rank``: its layout, Dispatch's result, its experts, ``dests`` as Combine."""
    dev = device()
    lay = ep_layout(p)
    if dispatch == "a2a":
        x = dispatch_a2a(p, all_layouts(p), dev)
    else:
        x = dispatch_rows(all_source_tokens(p, dev), lay)
    return Setup(p, sms, seed=p.seed, lead=lead, layout=lay, x_recv=x, weights=expert_weights(p, p.rank, dev),
                   combine=dests)


def check_remote(s, run, dests: Peers, comm: Comm, expected, variant: str, count=None) -> dict:
    """Poison this rank's buffer, barrier, ``run()`` (on every rank), barrier; compare with ``expected``."""
    import torch

    dests.poison()
    if count is not None:
        count.zero_()
    for d in s.dev.values():
        d.error.zero_()
    comm.sync()
    run()
    comm.sync()
    got = dests.buffer.float()
    res = {"config": s.problem.label(), "rank": s.problem.rank, "variant": variant,
           "unwritten": int(torch.isnan(got).sum()), **compare(got, expected),
           "error_flag": max(int(d.error.item()) for d in s.dev.values())}
    res["ok"] = res["ok"] and res["unwritten"] == 0 and res["error_flag"] == 0
    if count is not None:
        comm.all_reduce_(count)
        res["written_once"] = bool((count == 1).all())
        res["ok"] = res["ok"] and res["written_once"]
    return res


def check_rank(p: EpProblem, sms: int, kw: dict, dests: Peers, comm: Comm, dispatch: str = "regen") -> list:
    """Both schedules with remote and local stores, and the baseline's Combine copy, on fresh seeded inputs."""
    import torch

    s = rank_setup(p, sms, dests, dispatch)
    expected = expected_combine(p, device())
    count = torch.zeros((p.world_size, p.combine_rows, p.hidden // p.block_n), dtype=torch.int32, device=device())
    rows = [check_remote(s, lambda sc=sc: s.run(sc, True, kw, write_count=count), dests, comm, expected, sc, count)
            for sc in SCHEDULES]
    ref = s.reference()
    for sc in SCHEDULES:
        s.combine[False].poison()
        s.dev[sc].error.zero_()
        s.run(sc, False, kw)
        sync()
        res = s.combine[False].check(ref)
        rows.append({"config": p.label(), "rank": p.rank, "variant": f"{sc}_local", **res,
                     "error_flag": int(s.dev[sc].error.item())})
        rows[-1]["ok"] = res["ok"] and rows[-1]["error_flag"] == 0
    if not s.w8a8:
        from xstage.hw.moe.kernel import launch_combine_copy

        gemm, name = grouped_mm_fn(s)
        y = baseline_ffn(s, gemm)
        rows.append(check_remote(s, lambda: launch_combine_copy(y, s.packed_rank, s.packed_row, dests,
                                                                  block_n=p.block_n),
                                 dests, comm, expected, f"baseline_{name}+combine_copy"))
    return rows


def _capture(fn):
    """A CUDA graph of ``fn`` ("thread_local": NCCL's watchdog thread makes CUDA calls during captures)."""
    return capture(fn, capture_error_mode="thread_local")


def measure_rank(p: EpProblem, sms: int, kw: dict, dests: Peers, comm: Comm, *, trials: int = 25,
                 dry: bool = False, dispatch: str = "regen", lead: int | None = None) -> tuple:
    """(kernel rows, checks) of rank ``p.rank`` for one configuration (see the module docstring)."""
    s = rank_setup(p, sms, dests, dispatch, lead)
    lead_us = {} if lead is not None else tune_lead(s, kw, dry, pick=lambda med: agreed_lead(comm.gather(med)))
    fns, gname = variant_fns(s, kw, alt_loads=False)
    timed = set.intersection(*(set(names) for names in comm.gather(list(fns))))  # a baseline may fail on a rank
    fns = {name: fn for name, fn in fns.items() if name in timed}                 # every rank: the same barriers
    expected = expected_combine(p, device())
    checks = [check_remote(s, lambda sc=sc: s.run(sc, True, kw), dests, comm, expected, f"{sc}_timed")
              for sc in SCHEDULES]
    del expected
    times, modes = time_variants(fns, trials=trials, capture_fn=_capture, barrier=comm.sync,
                                 **({"warmup": 0, "rounds": 1} if dry else {"warmup": 3, "rounds": 4}))
    rows, _copy_GBps = kernel_rows(s, kw, times, modes, lead_us, baseline=gname, platform=PLATFORM, layout="ep",
                                     dispatch=dispatch)
    _, timings = tile_records(s, kw, remotes=(False,))   # the local-store medians the simulator replays
    for r in rows:
        r.update(measured_columns(timings))
    return rows, checks


# --- the torchrun entry point ----------------------------------------------------------------------
def _save(out_dir: Path, rows: list, checks: list, meta: dict) -> None:
    """Rank 0's records so far (rewritten after every configuration: a run stopped by its limit keeps them)."""
    from xstage.records import atomic_write_text
    from xstage.records.moe import save_run

    if rows:
        save_run(out_dir, rows, [], checks, meta, overwrite=True)
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out_dir / "moe-checks.json", json.dumps(checks, indent=1, default=str), overwrite=True)


def run(args) -> dict:
    """One rank's whole run under torchrun (``xstage.cli.bench_moe_dist`` parses ``args``): checks, then the
    sweep; rank 0 writes the records. Returns {"rank", "world", "rows", "checks", "failed", "wall_s"} (rows
    and checks of every rank on rank 0)."""
    import torch
    import torch.distributed as dist

    from xstage.hw.common.symm import init_distributed, symmetric_buffer
    if getattr(args, "backend", "torch") == "nvshmem":   # NVSHMEM's heap, same result shape (issue 18)
        from xstage.hw.common.nvshmem import symmetric_buffer
    from xstage.provenance import provenance

    t_start = time.time()
    cuda, rank, world = init_distributed()
    out_dir = Path(args.out)
    if rank:  # one console: the other ranks log to files
        out_dir.mkdir(parents=True, exist_ok=True)
        sys.stderr = open(out_dir / f"rank{rank}.log", "w", buffering=1)  # noqa: SIM115 - for the process' life
    sweep = (SMALL_SWEEP if args.sweep == "small" else SWEEP)[:args.max_configs]
    todo = ([] if args.no_checks else CHECKS) + sweep
    elems = max(t * h for h, _i, t, *_ in todo)
    pool, handle, table = symmetric_buffer((elems,), torch.bfloat16, cuda, dist.group.WORLD)
    comm, peers = Comm(handle), Peers(pool, table, handle.buffer_ptrs)
    sms = num_sms(False)
    kw = {**KERNEL_KW, "tma": bool(args.tma)}
    kw8 = dict(W8A8_KW)
    log = lambda msg: hw_log(f"[{time.time() - t_start:5.0f}s] {msg}")  # noqa: E731
    log(f"rank {rank}/{world}: kernel {kw}, w8a8 {kw8}, dispatch {args.dispatch}")

    def problem(h, i, t, r, prec, seed=0):
        return EpProblem(h, i, t, routing=r, precision=prec, world_size=world, rank=rank, seed=seed)

    checks, rows = [], []
    for h, i, t, r, prec in ([] if args.no_checks else CHECKS):
        p = problem(h, i, t, r, prec, seed=t)
        try:
            checks += check_rank(p, sms, kw8 if prec == "w8a8" else kw, peers.view(p.combine_rows, h), comm,
                                 args.dispatch)
        except Exception as err:  # noqa: BLE001 - report it; a rank that fails here may leave the others waiting
            traceback.print_exc()
            checks.append({"config": p.label(), "rank": rank, "variant": "checks", "ok": False, "error": repr(err)})
        log(", ".join(f"{c['variant']}={'ok' if c['ok'] else 'FAIL'}" for c in checks if c["config"] == p.label()))
    meta = {"config": {"args": vars(args), "kernel": kw, "kernel_w8a8": kw8, "world_size": world, "num_sms": sms,
                       "sweep": sweep, "layout": "ep"},
            "provenance": provenance(with_gpu=True)}
    for h, i, t, r, prec in sweep:
        if max(comm.gather(time.time() - t_start)) > args.budget_s:
            log(f"budget reached: skipping {h}/{i}/{t}/{r}/{prec}")
            continue
        p = problem(h, i, t, r, prec)
        try:
            kr, kc = measure_rank(p, sms, kw8 if prec == "w8a8" else kw, peers.view(p.combine_rows, h), comm,
                                  trials=args.trials, dispatch=args.dispatch, lead=args.lead)
        except Exception as err:  # noqa: BLE001
            traceback.print_exc()
            kr, kc = [], [{"config": p.label(), "rank": rank, "variant": "measure", "ok": False, "error": repr(err)}]
        all_rows = [x for part in comm.gather(kr) for x in part]
        all_checks = [x for part in comm.gather(checks + kc) for x in part]
        rows += kr
        checks += kc
        if rank == 0:
            _save(out_dir, all_rows, all_checks, meta)
            by = {(x["variant"], x["rank"]): x["time(us)"] for x in all_rows if x["config"] == p.label()}
            worst = {v: max(us for (vv, _), us in by.items() if vv == v) for v, _ in by}
            log(f"{p.label()}: " + ", ".join(f"{v} {us:.0f}" for v, us in worst.items()) + " us (slowest rank)")
    all_rows = [x for part in comm.gather(rows) for x in part]
    all_checks = [x for part in comm.gather(checks) for x in part]
    failed = [c for c in all_checks if not c.get("ok")]
    if rank == 0:
        _save(out_dir, all_rows, all_checks, meta)
    comm.sync()
    dist.destroy_process_group()
    return {"rank": rank, "world": world, "rows": all_rows, "checks": all_checks, "failed": failed,
            "wall_s": time.time() - t_start}


if __name__ == "__main__":  # the flags: xstage.cli.bench_moe_dist
    from xstage.cli.bench_moe_dist import NAME, main
    from xstage.errors import exit_with

    exit_with(main, NAME)
