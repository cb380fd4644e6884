"""``xstage attention``: FlashAttention fused with the Ulysses post-attention All-to-All.

    xstage attention layout --seq-len 8192 --heads 3 --world-size 8       # where each tile goes (CPU)
    xstage attention check --seq-len 2048 --head-dim 128                   # correctness on a GPU
    TRITON_INTERPRET=1 xstage attention check --seq-len 256 --head-dim 64 --block-m 16 --block-n 16 --world-size 4
    xstage attention run --out out/attention                                # the §5.3 sweep on a GPU
"""

from xstage.cli.bench_attention import ENTRY as SWEEP  # the GPU sweep, also `xstage attention run`
from xstage.cli.common import add_actions, add_json, print_json, print_table
from xstage.cli.exits import require_libraries
from xstage.errors import InputError, require_int

def _shape_args(p, seq_len=8192):
    p.add_argument("--seq-len", type=int, default=seq_len, help="M, tokens of the whole sequence")
    p.add_argument("--heads", type=int, default=3, help="heads per rank (H)")
    p.add_argument("--head-dim", type=int, default=128, help="d: 64 or 128")
    p.add_argument("--world-size", type=int, default=8, help="W ranks (emulated on one GPU)")
    p.add_argument("--rank", type=int, default=0, help="the sender rank")
    p.add_argument("--block-m", type=int, default=128)
    add_json(p, "print JSON")


def register(sub):
    s = add_actions(sub, "attention", "FlashAttention + Ulysses All-to-All kernels (layout, check, run)",
                    __doc__.splitlines()[0], "attention_command")

    lay = s.add_parser("layout", help="the post-attention All-to-All layout of one sender (no GPU)",
                       description="Which output tiles go to which rank, and the bytes that leave the sender.")
    _shape_args(lay)
    lay.add_argument("--tiles", action="store_true", help="print every tile (default: per destination)")
    lay.set_defaults(func=run_layout)

    chk = s.add_parser("check", help="run every variant once and compare with float32 SDPA",
                       description="Correctness of FA-only, Fused and Serial (and Serial-best on a GPU) on "
                                   "fresh random inputs; destinations poisoned before and checked after.")
    _shape_args(chk, seq_len=2048)
    chk.add_argument("--block-n", type=int, default=64)
    chk.add_argument("--num-stages", type=int, default=3)
    chk.add_argument("--num-warps", type=int, default=8)
    chk.add_argument("--tma", action="store_true", help="load Q/K/V through TMA descriptors")
    chk.add_argument("--store-cache", default=".wt", help="cache operator of the destination stores: .wt, '', .cs")
    chk.add_argument("--drip", action="store_true", help="spread each tile's remote stores over the next Q-loop")
    chk.add_argument("--natural-order", action="store_true", help="do not process the own chunk's tiles last")
    chk.add_argument("--stagger", action="store_true",
                     help="send each finished tile whole at a program-dependent step of the next Q-loop")
    chk.add_argument("--split-tail", action="store_true",
                     help="compute the last, partial wave's tiles as K/V parts each (see --tail-parts)")
    chk.add_argument("--tail-parts", type=int, default=2,
                     help="K/V parts per tail tile with --split-tail: 2..16, or 0 for the count that balances the wave")
    chk.add_argument("--seed", type=int, default=0)
    chk.set_defaults(func=run_check)

    SWEEP.add_run(s)


def _check_shape(args) -> None:
    for flag in ("seq_len", "heads", "head_dim", "world_size", "block_m"):
        require_int(f"--{flag.replace('_', '-')}", getattr(args, flag))
    require_int("--rank", args.rank, minimum=0, maximum=args.world_size - 1)


def run_layout(args) -> int:
    from xstage.sim.workloads.a2a_layout import A2ALayout

    _check_shape(args)

    lay = A2ALayout(args.seq_len, args.heads, args.head_dim, args.world_size, args.rank, args.block_m)
    plan = lay.tile_plan()
    if args.tiles:
        rows = plan.to_dict(orient="records")
    else:
        rows = (plan.groupby("dest_rank").agg(tiles=("tile", "size"), first_row=("row0", "min"),
                                              dest_head0=("dest_head", "min"), bytes_remote=("bytes_remote", "sum"))
                .reset_index().to_dict(orient="records"))
    head = {"seq_len": lay.seq_len, "heads": lay.heads, "head_dim": lay.head_dim, "world_size": lay.world_size,
            "rank": lay.rank, "chunk_rows": lay.chunk_rows, "dest_shape": list(lay.dest_shape),
            "tiles": lay.num_tiles, "tile_bytes": lay.tile_bytes, "remote_bytes": lay.remote_bytes}
    if args.json:
        print_json({**head, "rows": rows})
        return 0
    print_table(head)
    print()
    cols = list(rows[0])
    print("  ".join(f"{c:>12}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]!s:>12}" for c in cols))
    return 0


def run_check(args) -> int:
    _check_shape(args)
    for flag in ("block_n", "num_stages", "num_warps"):
        require_int(f"--{flag.replace('_', '-')}", getattr(args, flag))
    if args.split_tail:
        require_int("--tail-parts", args.tail_parts, minimum=0, maximum=16)
    if args.store_cache not in (".wt", "", ".cs"):
        raise InputError("--store-cache", args.store_cache, "must be .wt, '' or .cs")
    require_int("--seed", args.seed, minimum=0)
    from xstage.hw.attention.config import AttentionConfig  # no GPU imports: the shape is checked first

    cfg = AttentionConfig(args.seq_len, args.heads, args.head_dim, args.world_size, args.rank, args.block_m,
                          args.block_n, args.num_warps, args.num_stages, tma=args.tma,
                          store_cache=args.store_cache, local_last=not args.natural_order, drip=args.drip,
                          stagger=args.stagger, split_tail=args.split_tail,
                          tail_parts=args.tail_parts)
    require_libraries("torch", "triton")
    import torch

    from xstage.hw.attention import kernel as A

    if torch.cuda.is_available() and not A.interpreting():
        from xstage.hw.attention.checks import check_shape
        rows = check_shape(cfg, seed=args.seed)
    elif A.interpreting():
        rows = check_cpu(cfg, seed=args.seed)
    else:
        raise InputError("device", "cpu", "needs a CUDA GPU, or TRITON_INTERPRET=1 (small sizes) to run on the CPU")
    ok = all(r.get("ok") is not False for r in rows)
    if args.json:
        print_json({"ok": ok, "rows": rows})
    else:
        for r in rows:
            err = r.get("rel_err")
            print(f"{r['variant']:<22} {'ok' if r.get('ok') else 'FAIL' if r.get('ok') is False else 'skip':<5}"
                  + (f" rel_err={err:.2e}" if err is not None else "")
                  + (f" unwritten={r['unwritten']} stray={r['stray']}" if "unwritten" in r else ""))
    return 0 if ok else 1


def check_cpu(cfg, seed: int = 0) -> list:
    """FA-only, Fused and Serial under the Triton interpreter (no instrumentation, no SDPA baseline)."""
    import torch

    from xstage.hw.attention import kernel as A

    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn((cfg.seq_len, cfg.heads, cfg.head_dim), generator=gen).to(torch.bfloat16)
               for _ in range(3))
    ref = A.reference_attention(q, k, v)
    out = torch.full_like(q, float("nan"))
    A.launch_fa(q, k, v, cfg, out=out)
    rows = [{"variant": "fa", **A.compare(out, ref)}]
    dests = A.Destinations.emulated(cfg.layout, "cpu")
    for variant, run in (("fused", lambda: A.launch_fa(q, k, v, cfg, dest_table=dests.table)),
                         ("serial", lambda: A.launch_a2a(out, dests.table, cfg))):
        dests.poison()
        run()
        rows.append({"variant": variant, **dests.check(ref)})
    return rows
