"""``python -m xstage.hw.attention.bench``: FlashAttention–A2A measured on one GPU (§5.3), W ranks emulated.

    python3 -m xstage.hw.attention.bench --out $OUT/attention                     # benchmarks/gpu/attention.sh
    TRITON_INTERPRET=1 python -m xstage.hw.attention.bench --dry-run --out /tmp/a  # CPU dry run, tiny shapes

Flags are checked (and the output folder) before any GPU work; the run (``xstage.hw.attention.bench.run``)
writes the records; this prints the per-M summary (``xstage.compare.attention_records``). Exit status 1 if
a check failed, 2 on bad input.
"""

import sys

from xstage.cli.bench_args import Entry, add_attention_flags, out_folder, print_footer
from xstage.errors import InputError, require_int

NAME = "attention_bench"

RUN_HELP = "the §5.3 timing sweep on a GPU (records under --out)"  # as `xstage attention run`
RUN_DESCRIPTION = ("Correctness checks, then FA-only / Serial / Fused / SDPA / Serial-best timing per M (CUDA "
                   "graphs, medians); writes kernel and tile records.")


def add_flags(p) -> None:
    """The sweep's flags, declared once: ``python -m xstage.hw.attention.bench`` and ``xstage attention run``."""
    add_attention_flags(p, seq_lens="8192,16384,32768,49152,65536")
    p.add_argument("--trials", type=int, default=25)
    p.add_argument("--no-tune", action="store_true", help="skip the (block_n, stages) choice at M=16K")
    p.add_argument("--no-checks", action="store_true")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny shapes and blocks, no tuning (with TRITON_INTERPRET=1 on a CPU: tests this module)")


def check(args):
    """Every flag's value and the output folder, before any GPU work; bad input → ``InputError``."""
    from dataclasses import replace

    from xstage.hw.attention.config import AttentionConfig

    require_int("--trials", args.trials)
    try:
        lens = [int(m) for m in args.seq_lens.split(",")]
    except ValueError:
        raise InputError("--seq-lens", args.seq_lens, "must be comma-separated integers") from None
    base = AttentionConfig(256 if args.dry_run else 16384, args.heads, args.head_dim, args.world_size,
                           **({"block_m": 16, "block_n": 16} if args.dry_run else {}))
    for M in lens:
        replace(base, seq_len=M)
    out_folder(args.out, overwrite=args.overwrite, holds=("attention-kernel.parquet",))
    return args


def execute(args) -> int:
    """Run the checked sweep and print its per-M summary; exit status 1 if a check failed."""
    from xstage.compare.attention_records import summary_table
    from xstage.hw.attention import bench

    result = bench.run(args)
    measured = [r for r in result["rows"] if not r["variant"].endswith("_tune")]
    if measured:
        print(summary_table(measured))
    return print_footer(result["paths"], len(result["checks"]), result["failed"], result["wall_s"])


ENTRY = Entry(NAME, "python -m xstage.hw.attention.bench", __doc__, add_flags, check, execute,
              run_help=RUN_HELP, run_description=RUN_DESCRIPTION)
parser, parse_args, main = ENTRY.parser, ENTRY.parse_args, ENTRY.main


if __name__ == "__main__":
    sys.exit(main())
