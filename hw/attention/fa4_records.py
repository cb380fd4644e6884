"""Kernel records of the FA4 runs (the GPU side hands over numbers): one row per variant and M.

Row columns: the standard kernel columns (source, experiment, config, variant, time(us), trials) and
platform, M, heads, head_dim, world_size, rank, flops, compute(TFLOPs), bytes_remote, time quantiles, timing
("graph" | "eager"), paired_minus_fa(us) (median of matched pairs against ``fa4``), pairs, scheduler.
The per-M summary of these rows is ``xstage.compare.attention_fa4`` (pure; the CLI hands it to the bench).
"""

from xstage.provenance import this_gpu_platform
from xstage.records.kernel import timed_row

EXPERIMENT = "attention-fa4"
PLATFORM = "h200-pcie-host"   # the name rows carried before session 23, and still where torch sees no GPU


def kernel_row(lay, variant: str, times_us, *, platform: str | None = None, **extra) -> dict:
    platform = platform or this_gpu_platform()
    row = timed_row(EXPERIMENT, lay.label(), variant, times_us, flops=lay.flops, platform=platform, M=lay.seq_len,
                    heads=lay.heads, head_dim=lay.head_dim, world_size=lay.world_size, rank=lay.rank,
                    bytes_remote=lay.remote_bytes)
    if variant == "ce":
        row["copy(GBps)"] = lay.remote_bytes * lay.world_size / (lay.world_size - 1) / row["time(us)"] / 1e3
    row.update(extra)
    return row
