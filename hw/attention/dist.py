"""FlashAttention + post-attention All-to-All on W GPUs: one process per GPU, destinations in symmetric memory.

Every rank allocates its sequence-partitioned buffer D_j (M/W, W*H, d) in torch symmetric memory;
the rendezvous gives each rank the W peer base addresses, which become the fused kernel's
destination table -- the same kernel as on one GPU, where the table points at host-mapped
buffers instead. Runs at any world size, 1 included (``benchmarks/gpu/attention_dist.sh``):

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    torchrun --standalone --nproc-per-node=8 -m xstage.hw.attention.dist --out $OUT/attention-dist

Correctness first: every variant checked at M = 2048 with the untuned configuration. Then the kernel
configuration: rank 0 tunes FA-only at M = 16K (``attention_bench.tune``) and broadcasts it, and all
ranks pick the fused store option at that M (``attention_bench.pick_fused``, slowest rank's time);
or ``--config`` JSON. For each M: checks again (every rank's buffer poisoned,
written by all senders, compared with float32 SDPA of every sender's rows; Serial-best's buffer
compared with the fused kernel's), then every variant timed as on one GPU (CUDA graphs, warm-up,
rounds in rotated order, median; a barrier before each round, outside the timed window; clocks of
all GPUs read on rank 0 before and after). Rank 0 gathers every rank's rows and writes "kernel"
records (one row per variant, M and rank), rank 0's tile records and the checks to ``--out``; the
summary takes the maximum over ranks (``attention_records.summary_rows``).

Flags: ``xstage.cli.bench_attention_dist`` (checked before any GPU work).

Serial-best: torch SDPA (each backend; the alias ``serial_best`` is the fastest SDPA backend), then
NCCL ``all_to_all_single`` of the output rows and the local permute into D_j (``nccl_all_to_all``).
"""

import dataclasses
import statistics
import time
from dataclasses import replace
from pathlib import Path

from xstage.errors import InputError
from xstage.hw.attention.config import FUSED_FIELDS, AttentionConfig
from xstage.hw.attention.refs import compare
from xstage.hw.attention.tune import pick_fused, tune
from xstage.hw.attention.variants import kernel_variants, reference, sdpa_backends
from xstage.hw.common.a2a_nccl import nccl_all_to_all, permute_received, send_rows  # noqa: F401 - Serial-best's transfer
from xstage.hw.common.symm import init_distributed, symmetric_buffer
from xstage.hw.common.targets import apply_launch_env
from xstage.hw.common.timing import capture, gpu_clocks, paired_differences, sync, time_variants
from xstage.records.attention import alias_best_backend, kernel_row, save_run, tile_frame
from xstage.hw.common.log import hw_log

NCCL_ALIASES = ("sdpa", "serial_best", "nccl")  # rows copied under the fastest SDPA backend's name


# --- inputs, references, checks -------------------------------------------------------------------
def _qkv(cfg, sender: int, device, seed: int = 0):
    import torch

    gen = torch.Generator(device=device).manual_seed(1000 * seed + sender)
    shape = (cfg.seq_len, cfg.heads, cfg.head_dim)
    return [torch.randn(shape, device=device, dtype=torch.bfloat16, generator=gen) for _ in range(3)]


def symmetric_destinations(cfg, device, group, backend: str = "torch"):
    """(local buffer, rendezvous handle, device table of the W peer base addresses): torch symmetric memory,
    or NVSHMEM's heap (``backend`` "nvshmem", ``xstage.hw.common.nvshmem``: the same result shape)."""
    import torch

    if backend == "nvshmem":
        from xstage.hw.common.nvshmem import symmetric_buffer as nvshmem_buffer
        return nvshmem_buffer(cfg.layout.dest_shape, torch.bfloat16, device, group)
    return symmetric_buffer(cfg.layout.dest_shape, torch.bfloat16, device, group)


def local_destination(cfg):
    """The dry run's (buffer, None, table): world size 1 on the CPU, a plain buffer instead of symmetric memory."""
    import torch

    buf = torch.empty(cfg.layout.dest_shape, dtype=torch.bfloat16)
    return buf, None, torch.tensor([buf.data_ptr()], dtype=torch.int64)


def buffer_view(big, cfg):
    """D_j of ``cfg`` at the start of the (larger) symmetric buffer ``big``: the same base addresses."""
    shape = cfg.layout.dest_shape
    n = shape[0] * shape[1] * shape[2]
    if n > big.numel():
        raise InputError("seq_len", cfg.seq_len, f"needs {n} elements; the symmetric buffer holds {big.numel()}")
    return big.view(-1)[:n].view(shape)


def reference_dest(cfg, device, seed: int):
    """float32 D_j of this rank (``cfg.rank``): every sender's rows of its tokens, inputs regenerated
    from the per-sender seeds."""
    import torch

    lay = cfg.layout
    rows = slice(cfg.rank * lay.chunk_rows, (cfg.rank + 1) * lay.chunk_rows)
    ref = torch.empty(lay.dest_shape, dtype=torch.float32, device=device)
    for sender in range(cfg.world_size):
        q, k, v = _qkv(cfg, sender, device, seed)
        ref[:, sender * cfg.heads:(sender + 1) * cfg.heads] = reference(q[rows], k, v)
    return ref


def check_buffer(buf, ref) -> dict:
    """``buf`` against the float32 reference: relative error and unwritten (NaN) elements."""
    import torch

    unwritten = int(torch.isnan(buf).sum())
    res = compare(torch.nan_to_num(buf.float()), ref)
    return {**res, "unwritten": unwritten, "ok": unwritten == 0 and res["ok"]}


# --- records ---------------------------------------------------------------------------------------
def gather_rows(per_rank: list, backends=("cudnn", "flash"), **extra) -> list:
    """Rank 0's records from every rank's rows (a list per rank): all rows, ``extra`` columns added,
    plus the ``NCCL_ALIASES`` rows of the fastest SDPA backend (by the slowest rank's time)."""
    rows = [{**r, **extra} for rank_rows in per_rank for r in rank_rows]
    ranks = sorted({r["rank"] for r in rows})
    if ranks != list(range(len(per_rank))):
        raise InputError("ranks", ranks, f"must be 0..{len(per_rank) - 1}, each once per list")
    return rows + alias_best_backend(rows, backends, NCCL_ALIASES)


def slowest_rank(per_rank: list) -> list:
    """Rank 0's rows with ``time(us)`` replaced by the maximum over ranks (rows in the same order)."""
    return [{**rows[0], "time(us)": max(r["time(us)"] for r in rows), "ranks": len(rows)}
            for rows in zip(*per_rank)]


# --- the run (one process per GPU) -----------------------------------------------------------------
class Ranks:
    """The process group's helpers: rank, world, barrier, gather, CUDA-graph capture agreed by all ranks."""

    def __init__(self, device, eager: bool = False):
        import torch.distributed as dist

        self.dist, self.device, self.eager = dist, device, eager
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.backends = sdpa_backends() if device.type == "cuda" else ("math",)  # the baselines' SDPA backends

    def barrier(self) -> None:
        self.dist.barrier()

    def gather(self, obj) -> list:
        out = [None] * self.world
        self.dist.all_gather_object(out, obj)
        return out

    def all_true(self, flag: bool) -> bool:
        import torch

        t = torch.tensor([int(bool(flag))], dtype=torch.int32, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN)
        return bool(t.item())

    def capture(self, fn):
        """A CUDA graph of ``fn`` on every rank, or eager ``fn`` on every rank if any capture failed."""
        if self.eager:
            return fn, "eager"
        replay, mode = capture(fn, capture_error_mode="thread_local")  # NCCL's watchdog thread calls CUDA
        return (replay, mode) if self.all_true(mode == "graph") else (fn, "eager")

    def timing(self) -> dict:
        return {"capture_fn": self.capture, "barrier": self.barrier}

    def say(self, *msg) -> None:
        if self.rank == 0:
            hw_log(*msg)


def kernel_config(args, base, ranks, table) -> tuple:
    """The tuned configuration, identical on every rank, and the tuning rows (rank 0's FA-only tune,
    the store-option pick by the slowest rank)."""
    rows = []
    cfg = base
    if args.config is None and not args.no_tune:
        choice = [None]
        if ranks.rank == 0:
            tuned, rows = tune(M=args.tune_seq_len, heads=base.heads, head_dim=base.head_dim, world=ranks.world)
            choice = [dataclasses.asdict(tuned)]
        ranks.dist.broadcast_object_list(choice, src=0)
        cfg = replace(AttentionConfig(**choice[0]), world_size=ranks.world)
    if not args.no_tune and not set(FUSED_FIELDS) & set(args.config_fields):
        picked, pick_rows = pick_fused(replace(cfg, seq_len=args.tune_seq_len, rank=ranks.rank), table=table,
                                         reduce_rows=lambda r: slowest_rank(ranks.gather(r)),
                                         verbose=ranks.rank == 0, **ranks.timing())
        cfg = replace(cfg, **{f: getattr(picked, f) for f in FUSED_FIELDS})
        rows += pick_rows if ranks.rank == 0 else []
    return replace(cfg, rank=ranks.rank), [{**r, "platform": args.platform} for r in rows]


def measure_rank(cfg, ranks, big, table, args, timed: bool = True) -> tuple:
    """This rank's kernel rows, checks, clocks (rank 0, before and after the timing) and tile frames
    (rank 0's instrumented Fused and FA-only, run on every rank) at ``cfg.seq_len``; checks only
    unless ``timed``."""
    import torch

    from xstage.hw.attention import kernel as A

    dev, M, lay = ranks.device, cfg.seq_len, cfg.layout
    buf = buffer_view(big, cfg)
    q, k, v = _qkv(cfg, cfg.rank, dev, seed=M)
    ref = reference_dest(cfg, dev, seed=M)
    out = torch.empty_like(q)
    fns, variant_cfg = kernel_variants(cfg, q, k, v, out, table)
    sdpa_out = {}
    for backend in ranks.backends:
        try:
            o = A.sdpa(q, k, v, backend)
            sync()
        except RuntimeError as err:
            o = None
            hw_log(f"  rank {cfg.rank}: sdpa {backend} unavailable: {str(err)[:120]}")
        if ranks.all_true(o is not None):
            sdpa_out[backend] = o
    recv = torch.empty_like(q)
    dest = torch.empty(lay.dest_shape, dtype=torch.bfloat16, device=dev)
    for backend, o in sdpa_out.items():
        fns[f"sdpa_{backend}"] = lambda b=backend: A.sdpa(q, k, v, b)
        fns[f"serial_best_{backend}"] = lambda b=backend: nccl_all_to_all(A.sdpa(q, k, v, b), recv, dest)
        fns[f"nccl_{backend}"] = lambda o=o: nccl_all_to_all(o, recv, dest)
    label = lambda name: variant_cfg.get(name, cfg).label()  # noqa: E731
    checks = []
    own = slice(cfg.rank * cfg.heads, (cfg.rank + 1) * cfg.heads)
    out.fill_(float("nan"))
    fns["fa"]()
    res = A.compare(out[cfg.rank * lay.chunk_rows:(cfg.rank + 1) * lay.chunk_rows], ref[:, own])
    checks.append({"config": label("fa"), "variant": "fa", "rank": cfg.rank, "rows": "own chunk", **res})
    fused = None
    for name in [n for n in variant_cfg if n.startswith(("fused", "serial"))]:  # the Triton variants that store
        buf.fill_(float("nan"))  # poison, and let every rank finish poisoning before anyone stores
        sync()
        ranks.barrier()
        fns[name]()
        sync()
        ranks.barrier()  # every sender's stores have landed
        checks.append({"config": label(name), "variant": name, "rank": cfg.rank, **check_buffer(buf, ref)})
        fused = buf.clone() if name == "fused" else fused
    for backend in sdpa_out:
        dest.fill_(float("nan"))
        fns[f"serial_best_{backend}"]()
        sync()
        res, same = check_buffer(dest, ref), A.compare(torch.nan_to_num(dest.float()), fused)
        checks.append({"config": cfg.label(), "variant": f"serial_best_{backend}", "rank": cfg.rank, **res,
                       "rel_err_vs_fused": same["rel_err"], "ok": res["ok"] and same["ok"]})
    for x in checks:
        x["M"] = M
    if not timed:
        return [], checks, {}, []
    ranks.barrier()
    clocks_before = gpu_clocks() if ranks.rank == 0 else None
    ranks.barrier()
    times, modes = time_variants(fns, trials=args.trials, **ranks.timing(),
                                   **({"warmup": 0, "rounds": 1} if args.dry_run else {}))
    ranks.barrier()  # matched pairs (E_res and H without clock drift), each rank its own sender side
    paired = paired_differences(fns["fa"], {name: fns[name] for name in ("fused", "serial")},
                                  pairs=max(args.trials, 10), capture_fn=ranks.capture)
    ranks.barrier()
    clocks_after = gpu_clocks() if ranks.rank == 0 else None
    pairs = {name: {"paired_minus_fa(us)": float(statistics.median(d)), "pairs": len(d)} for name, d in paired.items()}
    rows = [kernel_row(variant_cfg.get(name, cfg), name, t, platform=args.platform, timing=modes[name],
                       **{f: getattr(variant_cfg.get(name, cfg), f) for f in FUSED_FIELDS}, **pairs.get(name, {}))
            for name, t in times.items()]
    tiles = []
    log = torch.zeros((lay.num_tiles, 8), dtype=torch.int64, device=dev)
    for schedule, kwargs in (("fused", {"dest_table": table}), ("fa", {"out": out})) if dev.type == "cuda" else ():
        log.zero_()
        ranks.barrier()
        A.launch_fa(q, k, v, cfg, tile_log=log, **kwargs)
        sync()
        if cfg.rank == 0:  # one rank's tiles: the compare layer replays one sender
            tiles.append(tile_frame(cfg, log.cpu().numpy(), schedule=schedule, platform=args.platform).assign(rank=0))
    return rows, checks, {"clocks_before": clocks_before, "clocks_after": clocks_after}, tiles


def run(args, seq_lens, base) -> dict:
    """One rank's whole run under torchrun (``xstage.cli.bench_attention_dist`` parses and checks the
    arguments): {"rank", "rows", "checks", "failed", "wall_s"} (every rank's checks; rank 0's rows)."""
    import torch
    import torch.distributed as dist

    apply_launch_env()
    t_start = time.time()
    if args.dry_run:  # one process on the CPU: gloo, a plain buffer, kernels in the Triton interpreter
        device = torch.device("cpu")
        store = dist.HashStore()
        dist.init_process_group("gloo", rank=0, world_size=1, store=store)
    else:
        if not torch.cuda.is_available():
            raise InputError("device", "cpu", "needs one CUDA GPU per rank (run under torchrun)")
        device = init_distributed()[0]
    try:
        ranks = Ranks(device, eager=args.eager)
        if ranks.rank == 0:
            ranks.say(f"attention_dist: world size {ranks.world}, platform {args.platform}; clocks (sm, mem, temp, "
                      f"power, reasons):\n{gpu_clocks()}")
        sizes = seq_lens + args.check_seq_lens + ([] if args.no_tune else [args.tune_seq_len])
        big_cfg = replace(base, seq_len=max(sizes), rank=ranks.rank)
        big, _handle, table = (local_destination(big_cfg) if args.dry_run
                               else symmetric_destinations(big_cfg, device, dist.group.WORLD,
                                                           getattr(args, "backend", "torch")))
        checks, rows, tiles = [], [], []
        meta = {"args": vars(args), "world_size": ranks.world}
        for M, timed in [(M, False) for M in args.check_seq_lens] + [(M, True) for M in seq_lens]:
            if timed and "kernel" not in meta:  # correctness first, then the tuning and the timed sweep
                cfg, rows = kernel_config(args, base, ranks, table)
                meta["kernel"] = cfg.label()
                ranks.say(f"  kernel config: {cfg.label()} ({time.time() - t_start:.0f}s)")
            r, c, clocks, t = measure_rank(replace(cfg if timed else base, seq_len=M, rank=ranks.rank), ranks, big,
                                           table, args, timed=timed)
            per_rank, all_checks = ranks.gather(r), ranks.gather(c)
            rows += gather_rows(per_rank, ranks.backends, **clocks) if ranks.rank == 0 and timed else []
            checks += [x for rank_checks in all_checks for x in rank_checks]
            tiles += t
            if ranks.rank == 0 and args.out and rows:  # saved after every M: a run stopped by its limit keeps what it has
                save_run(Path(args.out), rows, tiles, checks, meta, overwrite=True)
            bad = [f"{x['variant']}@rank{x['rank']}" for x in checks if x["M"] == M and x.get("ok") is False]
            ranks.say(f"  M={M}{'' if timed else ' (check only)'}: checks {'FAILED ' + str(bad) if bad else 'ok'}"
                      f" ({time.time() - t_start:.0f}s)")
        failed = [x for x in checks if x.get("ok") is False]
        ranks.barrier()
        return {"rank": ranks.rank, "rows": rows, "checks": checks, "failed": failed, "wall_s": time.time() - t_start}
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":  # the flags: xstage.cli.bench_attention_dist
    from xstage.cli.bench_attention_dist import NAME, main
    from xstage.errors import exit_with

    exit_with(main, NAME)
