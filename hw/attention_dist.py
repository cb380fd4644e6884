"""The W-rank FlashAttention–A2A path: one process per GPU, destinations in symmetric memory.

Every rank allocates its sequence-partitioned buffer (M/W, W*H, d) with torch symmetric memory;
the rendezvous gives each rank the W peer base addresses, which become the fused kernel's
destination table — the same kernel as on one GPU, where the table points at host-mapped
buffers instead. Runs at any world size, 1 included:

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \\
    python3 -m torch.distributed.run --standalone --nproc_per_node W -m xstage.hw.attention_dist --seq-len 8192

Each rank checks its own buffer against float32 SDPA of every sender's rows (inputs are
regenerated from per-sender seeds), then times FA-only, Fused and Serial with events on its own
stream (sender-side boundary; the barrier that makes the stores visible is outside the timing).
Serial-best over NCCL (SDPA + all_to_all_single + local permute) is left to the multi-GPU issue.
"""

import argparse
import json
import os
import sys
import warnings

from xstage.hw import attention as A


def _qkv(cfg, sender: int, device):
    import torch

    gen = torch.Generator(device=device).manual_seed(1000 + sender)
    shape = (cfg.seq_len, cfg.heads, cfg.head_dim)
    return [torch.randn(shape, device=device, dtype=torch.bfloat16, generator=gen) for _ in range(3)]


def symmetric_destinations(cfg, device, group):
    """(local buffer, rendezvous handle, device table of the W peer base addresses)."""
    import torch
    import torch.distributed._symmetric_memory as symm_mem

    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)  # needed by older torch, a no-op later
    if enable is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            enable(group.group_name)
    buf = symm_mem.empty(cfg.layout.dest_shape, dtype=torch.bfloat16, device=device)
    handle = symm_mem.rendezvous(buf, group)
    table = torch.tensor([int(p) for p in handle.buffer_ptrs], dtype=torch.int64, device=device)
    return buf, handle, table


def check_rank(cfg, buf, device) -> dict:
    """Compare this rank's buffer with every sender's float32 reference rows."""
    import torch

    lay = cfg.layout
    rows = slice(cfg.rank * lay.chunk_rows, (cfg.rank + 1) * lay.chunk_rows)
    worst, unwritten = 0.0, 0
    for sender in range(cfg.world_size):
        q, k, v = _qkv(cfg, sender, device)
        ref = A.reference_attention(q[rows], k, v)
        got = buf[:, sender * cfg.heads:(sender + 1) * cfg.heads].float()
        unwritten += int(torch.isnan(got).sum())
        worst = max(worst, A.compare(got, ref)["rel_err"])
    return {"rel_err": worst, "unwritten": unwritten, "ok": unwritten == 0 and worst <= 1e-2}


def time_events(fn, trials: int, warmup: int = 3) -> list:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) * 1e3)
    return out


def main(argv=None) -> int:
    import statistics

    import torch
    import torch.distributed as dist

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-len", type=int, default=8192)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--trials", type=int, default=20)
    args = p.parse_args(argv)
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = A.AttentionConfig(args.seq_len, args.heads, args.head_dim, world, rank)
    buf, handle, table = symmetric_destinations(cfg, device, dist.group.WORLD)
    q, k, v = _qkv(cfg, rank, device)

    buf.fill_(float("nan"))
    torch.cuda.synchronize()
    handle.barrier()
    A.launch_fa(q, k, v, cfg, dest_table=table)
    torch.cuda.synchronize()
    handle.barrier()
    result = {"rank": rank, "world_size": world, "config": cfg.label(), "fused": check_rank(cfg, buf, device)}

    out = torch.empty_like(q)
    fns = {"fa": lambda: A.launch_fa(q, k, v, cfg, out=out),
           "fused": lambda: A.launch_fa(q, k, v, cfg, dest_table=table),
           "serial": lambda: A.launch_a2a(A.launch_fa(q, k, v, cfg, out=out), table, cfg)}
    for name, fn in fns.items():
        handle.barrier()
        result[f"{name}_us"] = statistics.median(time_events(fn, args.trials))
    handle.barrier()
    results = [None] * world
    dist.all_gather_object(results, result)
    if rank == 0:
        print(json.dumps(results, indent=1))
    ok = all(r["fused"]["ok"] for r in results)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
