"""``xstage moe``: the fused MoE FFN of one expert-parallel rank (Linear-1, SwiGLU, Linear-2, Combine stores).

    xstage moe layout --hidden 7168 --intermediate 2048 --tokens 16384 --routing skewed   # receive layout (CPU)
    xstage moe check --hidden 2048 --intermediate 512 --tokens 1000                      # correctness on a GPU
    TRITON_INTERPRET=1 xstage moe check --hidden 64 --intermediate 32 --tokens 70 --block-m 16 --block-n 32 \\
        --block-k 16
    xstage moe run --out out/moe                                                        # the §5.2 sweep on a GPU
"""

from xstage.cli.bench_moe import ENTRY as SWEEP  # the GPU sweep, also `xstage moe run`
from xstage.cli.common import add_actions, add_json, print_json, print_table
from xstage.cli.exits import require_libraries
from xstage.errors import InputError, require_int


def _problem_args(p, hidden=2048, intermediate=512, tokens=1000):
    p.add_argument("--hidden", type=int, default=hidden, help="H, model width")
    p.add_argument("--intermediate", type=int, default=intermediate, help="I, expert intermediate width")
    p.add_argument("--tokens", type=int, default=tokens, help="token-expert assignments this GPU receives")
    p.add_argument("--experts", type=int, default=8, help="local experts")
    p.add_argument("--routing", default="balanced", help="balanced | skewed")
    p.add_argument("--precision", default="bf16", help="bf16 | w8a8 (fp8 e4m3 weights and activations)")
    p.add_argument("--world-size", type=int, default=8, help="W ranks (W-1 emulated by host-mapped buffers)")
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--block-m", type=int, default=128)
    p.add_argument("--block-n", type=int, default=128)
    p.add_argument("--num-sms", type=int, default=None, help="persistent programs (default: the GPU's SMs, even)")
    add_json(p, "print JSON")


def _problem(args):
    from xstage.sim.workloads.moe_layout import MoeProblem

    for flag in ("hidden", "intermediate", "tokens", "experts", "world_size", "top_k", "block_m", "block_n"):
        require_int(f"--{flag.replace('_', '-')}", getattr(args, flag))
    require_int("--seed", args.seed, minimum=0)

    return MoeProblem(args.hidden, args.intermediate, args.tokens, local_experts=args.experts, routing=args.routing,
                      world_size=args.world_size, top_k=args.top_k, seed=args.seed, block_m=args.block_m,
                      block_n=args.block_n, precision=args.precision)


def register(sub):
    s = add_actions(sub, "moe", "fused MoE FFN kernel with expert-wave / interleaved schedules (layout, check, run)",
                    __doc__.splitlines()[0], "moe_command")

    lay = s.add_parser("layout", help="routing, receive layout and Combine bytes of one rank (no GPU)",
                       description="Per local expert: tokens and row blocks; Combine bytes to the own rank and the "
                                   "others; tiles and lead D of both schedules.")
    _problem_args(lay)
    lay.set_defaults(func=run_layout)

    chk = s.add_parser("check", help="both schedules, remote and local stores, against a float32 reference",
                       description="Fresh random tokens, weights and routing; Combine buffers poisoned; every "
                                   "Combine (row, N tile) must be written exactly once and the error flag stay 0.")
    _problem_args(chk)
    chk.add_argument("--block-k", type=int, default=64)
    chk.add_argument("--num-stages", type=int, default=3)
    chk.add_argument("--num-warps", type=int, default=8)
    chk.set_defaults(func=run_check)

    SWEEP.add_run(s)


def _sms(args) -> int:
    if args.num_sms is not None:
        if args.num_sms < 2 or args.num_sms % 2:
            raise InputError("--num-sms", args.num_sms, "must be an even number >= 2 (CTA pairs)")
        return args.num_sms
    return 132


def run_layout(args) -> int:
    import numpy as np

    from xstage.sim.workloads.moe_layout import check_layout, dispatch_layout
    from xstage.sim.model import lead_knee_rows
    from xstage.sim.schedules import make_moe_schedule

    p = _problem(args)
    lay = dispatch_layout(p)
    check_layout(lay)
    sms = _sms(args)
    lead = max(1, lead_knee_rows(p.block_n, sms, p.intermediate))
    wave = make_moe_schedule("expert_wave", lay.grid, sms)
    out = {"config": p.label(), "tokens_per_expert": lay.tokens_per_expert.tolist(),
           "rows_per_expert": list(lay.grid.rows_per_expert), "recv_rows": lay.recv_rows,
           "combine_rows_per_rank": p.combine_rows, **lay.combine_bytes(),
           "tiles": int(len(wave.tiles)), "num_sms": sms, "lead_rows": lead,
           "wave_experts": wave.params["wave_experts"], "GFLOP": p.flops / 1e9,
           "rows_to_rank": np.bincount(lay.dest_rank[lay.valid], minlength=p.world_size).tolist()}
    if args.json:
        print_json(out)
    else:
        print_table({k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in out.items()})
    return 0


def run_check(args) -> int:
    p = _problem(args)
    if args.num_sms is not None:
        _sms(args)
    kw = {"block_k": require_int("--block-k", args.block_k), "num_stages": require_int("--num-stages", args.num_stages),
          "num_warps": require_int("--num-warps", args.num_warps)}
    require_libraries("torch", "triton")
    from xstage.hw.moe import bench as B

    sms = args.num_sms or B.num_sms(False)
    rows = B.check_problem(p, sms, kw, seed=args.seed)
    if args.json:
        print_json(rows)
    else:
        for r in rows:
            print(f"{r['variant']:>40s}: {'ok' if r['ok'] else 'FAIL'}  rel_err={r['rel_err']:.2e} "
                  f"unwritten={r['unwritten']} stray={r['stray']} written_once={r.get('written_once', '-')} "
                  f"error_flag={r.get('error_flag', '-')}")
    return 0 if all(r["ok"] for r in rows) else 1
