"""``torchrun ... -m xstage.hw.moe.dist``: the fused MoE FFN at expert parallelism over W GPUs.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    torchrun --standalone --nproc-per-node W -m xstage.hw.moe.dist --out $OUT/moe-dist   # benchmarks/gpu/moe_dist.sh

Flags are checked before any GPU work; every rank runs ``xstage.hw.moe.dist.run``; rank 0 prints the
per-configuration table (slowest rank) and the summary (``xstage.compare.moe_records``, which replays the
simulator on the measured medians). Exit status 1 if a check failed on any rank, 2 on bad input.
"""

import json
import sys

from xstage.cli.bench_args import BenchParser, add_sweep_flags, check_sweep_flags, guard, out_folder
from xstage.errors import require_int

NAME = "moe_dist"
TABLE_COLUMNS = ("config", "expert_wave(us)", "interleaved(us)", "speedup_interleaved", "expert_wave_local(us)",
                 "interleaved_local(us)", "grouped_mm(us)", "combine_copy(us)", "gemm_vs_grouped_mm", "sim_speedup")


def parser() -> BenchParser:
    ap = BenchParser(prog="torchrun ... -m xstage.hw.moe.dist", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output folder (rank 0 writes the records)")
    ap.add_argument("--sweep", choices=("full", "small"), default="full")
    add_sweep_flags(ap, budget_s=330.0)
    ap.add_argument("--dispatch", choices=("a2a", "regen"), default="a2a")
    ap.add_argument("--lead", type=int, default=None, help="interleaved lead D (default: tuned as moe_bench)")
    ap.add_argument("--tma", type=int, choices=(0, 1), default=1, help="bf16 kernel: TMA loads of x/W1/W2")
    ap.add_argument("--no-checks", action="store_true")
    ap.add_argument("--backend", choices=("torch", "nvshmem"), default="torch",
                    help="Combine buffers from torch symmetric memory (default) or NVSHMEM's heap (nvshmem4py)")
    return ap


def parse_args(argv=None):
    """The checked flags; bad input → ``InputError``. (The records are rewritten after every configuration,
    as before: the script passes a fresh folder.)"""
    args = parser().parse_args(argv)
    check_sweep_flags(args)
    if args.lead is not None:
        require_int("--lead", args.lead)
    out_folder(args.out)
    if args.backend != "torch":
        from xstage.hw.common.nvshmem import core
        core()                              # one line when nvshmem4py is missing
    return args


def _main(argv) -> int:
    args = parse_args(argv)
    from xstage.cli.bench_moe import summary_table
    from xstage.compare.moe_records import summarize
    from xstage.hw.moe import dist

    result = dist.run(args)
    if result["rank"] == 0:
        if result["rows"]:
            print(summary_table(result["rows"], TABLE_COLUMNS))
            print(json.dumps(summarize(args.out, dist.PLATFORM), indent=1, default=str))
        print(f"moe_dist: W = {result['world']}, {len(result['checks']) - len(result['failed'])}/"
              f"{len(result['checks'])} checks ok, {len({x['config'] for x in result['rows']})} configurations, "
              f"{result['wall_s']:.0f}s")
    return 1 if result["failed"] else 0


def main(argv=None) -> int:
    return guard(NAME, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
