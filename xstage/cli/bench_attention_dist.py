"""``torchrun ... -m xstage.hw.attention.dist``: FlashAttention + post-attention All-to-All on W GPUs.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    torchrun --standalone --nproc-per-node=8 -m xstage.hw.attention.dist --out $OUT/attention-dist

Every flag, shape and the output folder are checked before any GPU work (``parse_args``); every rank
runs ``xstage.hw.attention.dist.run``; rank 0 prints the per-M summary (slowest rank,
``xstage.compare.attention_records``). Exit status 1 if a check failed, 2 on bad input.
"""

import dataclasses
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from xstage.cli.bench_args import BenchParser, guard, out_folder, print_footer
from xstage.errors import InputError, require_int
from xstage.hw.attention.config import AttentionConfig

NAME = "attention_dist"
SEQ_LENS = "8192,16384,32768,49152,65536"
SHAPE_FIELDS = ("seq_len", "world_size", "rank")  # set by the run, not by --config


def parse_seq_lens(text: str) -> list:
    from xstage.units import parse_size

    try:
        lens = [parse_size(x.strip(), "--seq-lens") for x in str(text).split(",") if x.strip()]
    except InputError:
        raise InputError("--seq-lens", text, "must be sequence lengths such as 8192,16K,64K") from None
    if not lens:
        raise InputError("--seq-lens", text, "must name at least one sequence length")
    return lens


def config_from_json(text: str, base: AttentionConfig) -> tuple:
    """(``base`` with the fields of a JSON object, the field names); the object inline or in a file,
    e.g. '{"block_n": 128, "num_stages": 3, "tma": true}'."""
    path = Path(text)
    raw = path.read_text() if not text.lstrip().startswith("{") and path.is_file() else text
    try:
        fields = json.loads(raw)
    except json.JSONDecodeError:
        raise InputError("--config", text, "must be a JSON object or a file holding one") from None
    if not isinstance(fields, dict):
        raise InputError("--config", text, "must be a JSON object")
    allowed = {f.name for f in dataclasses.fields(AttentionConfig)} - set(SHAPE_FIELDS)
    bad = sorted(set(fields) - allowed)
    if bad:
        raise InputError("--config", bad, f"are not kernel fields (allowed: {', '.join(sorted(allowed))})")
    return replace(base, **fields), sorted(fields)


def parse_args(argv=None, world: int | None = None) -> tuple:
    """(args, seq_lens, base config) for a run of ``world`` ranks ($WORLD_SIZE); bad input → InputError."""
    p = BenchParser(prog="torchrun ... -m xstage.hw.attention.dist", description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="output folder for the records (rank 0 writes); none: print only")
    p.add_argument("--seq-lens", default=SEQ_LENS, help="comma-separated M (8192 or 8K)")
    p.add_argument("--seq-len", default=None, help="one M (same as --seq-lens M)")
    p.add_argument("--heads", type=int, default=3, help="heads per rank (H)")
    p.add_argument("--head-dim", type=int, default=128, help="d: 64 or 128")
    p.add_argument("--trials", type=int, default=25, help="timed trials per variant (5 rounds)")
    p.add_argument("--tune-seq-len", default="16384", help="M of the tuning and the store-option pick")
    p.add_argument("--check-seq-lens", default="2048", help="M checked (not timed) with the untuned configuration "
                                                             "before the tuning ('none': skip)")
    p.add_argument("--config", default=None, help="kernel configuration, JSON object or file (skips tuning)")
    p.add_argument("--no-tune", action="store_true", help="default kernel configuration, no store-option pick")
    p.add_argument("--platform", default=None, help="platform named in the records (default: h200-nvlink, "
                                                     "or h200-local at world size 1)")
    p.add_argument("--eager", action="store_true", help="no CUDA graphs")
    p.add_argument("--backend", choices=("torch", "nvshmem"), default="torch",
                   help="destination buffers from torch symmetric memory (default) or NVSHMEM's heap (nvshmem4py)")
    p.add_argument("--overwrite", action="store_true", help="replace records in --out")
    p.add_argument("--dry-run", action="store_true", help="world size 1 on the CPU with TRITON_INTERPRET=1, tiny "
                                                          "blocks, no tuning, one round (tests this module)")
    args = p.parse_args(argv)
    world = require_int("WORLD_SIZE", world if world is not None else os.environ.get("WORLD_SIZE", "1"))
    require_int("--trials", args.trials)
    seq_lens = parse_seq_lens(args.seq_len if args.seq_len is not None else args.seq_lens)
    args.tune_seq_len = parse_seq_lens(args.tune_seq_len)[0]
    args.check_seq_lens = [] if args.check_seq_lens == "none" else parse_seq_lens(args.check_seq_lens)
    if args.dry_run and world != 1:
        raise InputError("--dry-run", f"world size {world}", "runs one process (world size 1)")
    base, args.config_fields = AttentionConfig(args.tune_seq_len, args.heads, args.head_dim, world), []
    if args.dry_run:
        base, args.no_tune = replace(base, block_m=16, block_n=16, num_warps=4, num_stages=2), True
    if args.config is not None:
        base, args.config_fields = config_from_json(args.config, base)
    for M in seq_lens + args.check_seq_lens:  # every shape validated before any GPU work
        replace(base, seq_len=M)
    if args.platform is None:
        args.platform = "h200-nvlink" if world > 1 else "h200-local"
    if args.backend != "torch":
        if args.dry_run:
            raise InputError("--backend", args.backend, "needs the GPU (--dry-run uses a plain buffer)")
        from xstage.hw.common.nvshmem import core
        core()                              # one line when nvshmem4py is missing
    if args.out:
        out_folder(args.out, overwrite=args.overwrite, holds=("attention-kernel.parquet",))
    return args, seq_lens, base


def _main(argv) -> int:
    args, seq_lens, base = parse_args(argv)
    from xstage.compare.attention_records import summary_table
    from xstage.hw.attention import dist

    result = dist.run(args, seq_lens, base)
    if result["rank"] == 0:
        print(summary_table(result["rows"], extra=("ranks",)))
        print_footer([args.out or "(none: no --out)"], len(result["checks"]), result["failed"], result["wall_s"])
    return 1 if result["failed"] else 0


def main(argv=None) -> int:
    """Validate the arguments (before any GPU work), then run; bad input → one line, exit 2."""
    return guard(NAME, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
