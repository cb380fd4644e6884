"""``python -m xstage.hw.microbench.runner --selftest``: the remote-store microbenchmark's self-test on a GPU.

    python -m xstage.hw.microbench.runner --selftest [--target host|local] [--small]
    torchrun --standalone --nproc-per-node=8 -m xstage.hw.microbench.runner --selftest --target peer --peer-pattern all

Timer tick, pattern checks in every mode and gap kind, and a corrupted word that must be caught
(``xstage.hw.microbench.selftest``); rank 0 prints the JSON. Exit status 2 on bad input.
"""

import os
import sys
import time

from xstage.cli.bench_args import BenchParser, guard
from xstage.errors import require_positive

NAME = "microbench"


def parser() -> BenchParser:
    ap = BenchParser(prog="python -m xstage.hw.microbench.runner", description=__doc__.splitlines()[0])
    ap.add_argument("--selftest", action="store_true", help="run the correctness self-test")
    ap.add_argument("--target", default="host", choices=("host", "local", "peer"),
                    help="peer: torch symmetric memory, the next rank (itself at world size 1)")
    ap.add_argument("--peer-pattern", default="next",
                    help="peer target: next (one sender -> the next rank) or all (all-to-all: each rank's "
                    "producers spread over every other rank, all ranks at once)")
    ap.add_argument("--small", action="store_true", help="tiny sizes (for compute-sanitizer)")
    ap.add_argument("--timeout-ms", type=float, default=2000.0, help="bound of every in-kernel spin")
    return ap


def parse_args(argv=None):
    """The checked flags; bad input → ``InputError``."""
    from xstage.hw.common.targets import check_peer_pattern

    args = parser().parse_args(argv)
    require_positive("--timeout-ms", args.timeout_ms)
    check_peer_pattern(args.peer_pattern, args.target)
    return args


def _main(argv) -> int:
    args = parse_args(argv)
    if not args.selftest:
        parser().print_help()
        return 2
    from xstage.cli import print_json
    from xstage.hw.microbench.selftest import selftest

    t = time.perf_counter()
    out = selftest(args.target, args.small, args.timeout_ms, args.peer_pattern)
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:                  # under torchrun every rank checks its own stores; rank 0 prints the JSON
        print_json(out)
    print(f"[selftest] rank {rank}: passed in {time.perf_counter() - t:.1f} s"
          + (f" ({out['corruption_caught'][:60]}...)" if rank else ""), file=sys.stderr)
    return 0


def main(argv=None) -> int:
    return guard(NAME, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
