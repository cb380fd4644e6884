"""``python -m xstage.hw.attention.fa4_bench``: FA4 as the FA core of FlashAttention + Ulysses All-to-All
(issue 16), one H200, W ranks emulated.

    python3 -m xstage.hw.attention.fa4_bench --out $OUT/attention-fa4     # benchmarks/gpu/attention_fa4.sh

Flags are checked (every shape, and the output folder) before any GPU work; the run
(``xstage.hw.attention.fa4_bench.run``) writes the records; this prints the per-M summary. Exit status 1
if a check failed, 2 on bad input.
"""

import sys

from xstage.cli.bench_args import Entry, add_attention_flags, out_folder, print_footer
from xstage.errors import InputError, require_int, require_positive

NAME = "fa4_bench"


def add_flags(p) -> None:
    """The FA4 sweep's flags, declared once."""
    add_attention_flags(p, seq_lens="8192,16384,32768,65536")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--trials", type=int, default=25)
    p.add_argument("--pairs", type=int, default=30)
    p.add_argument("--variants", default="all", help="comma list, or 'all'")
    p.add_argument("--tile-mn", default="128x64", help="extra FA4 tile_mn to time (comma list; '' for none)")
    p.add_argument("--no-vmm", action="store_true")
    p.add_argument("--persistent", action="store_true",
                   help="EXPERIMENT: FA4's SM90 forward with StaticPersistentTileScheduler (own process, under timeout)")
    p.add_argument("--no-pers", action="store_true",
                   help="leave out PersistentSm90 (pfa4, serial_pfa4, fused_*_pers: hw/attention/fa4_persistent.py)")
    p.add_argument("--pers-diag", default="stagger",
                   help="further kernels of hw/attention/fa4_persistent.py to time (pfa4_<k>, fused_vmm_pers_<k>; "
                        "comma list of stagger, waitend, lsu, drain1 (stock one-tile grid), drainll / staggerll "
                        "(own chunk last), staggerll1 (sends over the whole next mainloop), staggersplit / staggersplitw "
                        "(staggerll with the last wave split along K/V; w: each send spread over its CTA's window); "
                        "'' for none)")
    p.add_argument("--tag", default="", help="suffix of the record file names (e.g. 'persistent')")
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--budget-s", type=float, default=400.0, help="start no new M after this many seconds")
    p.add_argument("--overwrite", action="store_true")


def check(args):
    """Every flag's value (every shape validated) and the output folder, before any GPU work."""
    from xstage.sim.workloads.receive_layout import ReceiveLayout

    try:
        args.seq_lens = [int(x) for x in args.seq_lens.split(",") if x.strip()]
    except ValueError:
        raise InputError("--seq-lens", args.seq_lens, "must be comma-separated integers") from None
    if not args.seq_lens:
        raise InputError("--seq-lens", "", "must name at least one sequence length")
    try:
        args.tile_mn = [tuple(int(v) for v in t.lower().split("x")) for t in args.tile_mn.split(",") if t.strip()]
    except ValueError:
        raise InputError("--tile-mn", args.tile_mn, "must be MxN integers, comma-separated") from None
    if any(len(t) != 2 for t in args.tile_mn):
        raise InputError("--tile-mn", args.tile_mn, "must be MxN integers, comma-separated")
    from xstage.hw.attention.fa4_persistent import NAMES

    args.pers_diag = [d.strip() for d in args.pers_diag.split(",") if d.strip()]
    bad = [d for d in args.pers_diag if d not in NAMES[1:]]
    if bad:
        raise InputError("--pers-diag", ",".join(bad), f"must name kernels of {NAMES[1:]}")
    require_int("--trials", args.trials, minimum=10)
    require_int("--pairs", args.pairs, minimum=10)
    require_positive("--budget-s", args.budget_s)
    for m in args.seq_lens:
        ReceiveLayout(m, args.heads, args.head_dim, args.world_size, args.rank)
    sfx = f"-{args.tag}" if args.tag else ""
    out_folder(args.out, overwrite=args.overwrite, holds=(f"attention-fa4{sfx}-kernel.parquet",))
    return args


def execute(args) -> int:
    """Run the checked sweep and print its per-M summary; exit status 1 if a check failed."""
    from xstage.compare.attention_fa4 import summary_file, table
    from xstage.hw.attention import fa4_bench

    result = fa4_bench.run(args, summarise=summary_file)
    summaries, checks = result["summaries"], result["checks"]
    failed = [c for c in checks if c.get("ok") is False]
    print(table(summaries))
    for s in summaries:
        print(f"M={s['M']}: " + ", ".join(f"{n} {d['us']:.1f}us res {d.get('e_res_paired_us', float('nan')):.1f} "
                                          f"H {d.get('hiding_ratio_paired', float('nan')):.3f}" for n, d in s["fused"].items()))
    return print_footer(result["paths"], len(checks), [c.get("variant") for c in failed], result["wall_s"])


ENTRY = Entry(NAME, "python -m xstage.hw.attention.fa4_bench", __doc__, add_flags, check, execute)
parser, parse_args, main = ENTRY.parser, ENTRY.parse_args, ENTRY.main


if __name__ == "__main__":
    sys.exit(main())
