"""Core subcommands: ``xstage model``, ``xstage model fa``, ``xstage sim bursts``, ``xstage platforms``."""


from xstage.errors import InputError, require_int, require_positive
from xstage.sim import model
from xstage.sim.platform import bundled_platforms, load_platform
from xstage.units import MiB, parse_size


def register(sub):
    p = sub.add_parser("model", help="evaluate the analytic Burst-Gap model (Eq. 1-7, 10)",
                       description="Evaluate the Burst-Gap model for K producers each issuing B bytes, "
                       "followed by a producer-side gap G. `xstage model fa ...` audits a FlashAttention + "
                       "All-to-All configuration (Eq. 17-20).")
    _platform_arg(p, required=False)
    p.add_argument("--producers", "-K", type=str, help="concurrent producers K (<= platform SMs)")
    p.add_argument("--bytes-per-producer", "-B", type=str, help="bytes per producer per burst (32KiB, 4.6MB, ...)")
    p.add_argument("--gap-us", "-G", type=str, default="0", help="producer-side gap G in us (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_model)
    msub = p.add_subparsers(dest="model_kind", metavar="{fa}")
    fa = msub.add_parser("fa", help="FlashAttention + All-to-All design test (Eq. 17-20)",
                         description="Audit a fused FlashAttention + All-to-All: aligned output-tile burst, "
                         "recovery gap G*, the conservative sequence bound M_ub* (Eq. 20).")
    _platform_arg(fa, required=True)
    fa.add_argument("--producers", "-K", required=True, help="persistent CTAs issuing aligned output tiles")
    fa.add_argument("--block-m", type=str, default="128", help="output tile rows b_m (default 128)")
    fa.add_argument("--block-n", type=str, default="128", help="KV tile width b_n (default 128)")
    fa.add_argument("--head-dim", type=str, default="128", help="head dimension d (default 128)")
    fa.add_argument("--out-bytes", type=str, default="2", help="output element size in bytes (default 2: bf16)")
    fa.add_argument("--sigma-us", type=str, default="0.79", help="Q-loop time per KV tile sigma (default 0.79 us)")
    fa.add_argument("--json", action="store_true", help="print one JSON object")
    fa.set_defaults(func=run_model_fa)

    s = sub.add_parser("sim", help="run the simpy X-Stage simulator",
                       description="Simulate the X-Stage with simpy.")
    ssub = s.add_subparsers(dest="sim_kind", metavar="{bursts}", required=True)
    b = ssub.add_parser("bursts", help="periodic / isolated / local / coupled burst experiment",
                        description="K producers issue B bytes each, then wait G us; repeated N times.")
    _platform_arg(b, required=True)
    b.add_argument("--producers", "-K", required=True)
    b.add_argument("--bytes-per-producer", "-B", required=True)
    b.add_argument("--gap-us", "-G", default="0")
    b.add_argument("--bursts", "-n", default="200", help="bursts per producer (default 200)")
    b.add_argument("--mode", default="periodic", help="periodic | isolated | local | coupled")
    b.add_argument("--queue", default="fluid", help="fluid (exact, fast) | chunked (4 KiB chunks, cross-check)")
    b.add_argument("--chunk", default="4KiB", help="chunk size for --queue chunked")
    b.add_argument("--engine", default="auto", help="auto (exact for the fluid queue) | exact (closed-form "
                   "recurrence, K identical producers) | simpy (the event-driven reference)")
    b.add_argument("--skip", default=None, help="bursts left out of the medians, counted from the first "
                   "(default: the closed-form warm-up; the summary says whether its window is steady)")
    b.add_argument("--out", default=None, help="write the burst records (.parquet or .csv)")
    b.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=run_sim_bursts)

    pl = sub.add_parser("platforms", help="list bundled platforms or show one",
                        description="List the bundled platforms, or show one platform's parameters.")
    pl.add_argument("name", nargs="?", help="platform name or .json file to show")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=run_platforms)


def _platform_arg(p, required):
    p.add_argument("--platform", "-p", required=required, default=None if required else "paper-b200",
                   help=f"bundled platform name ({', '.join(bundled_platforms())}) or platform .json file"
                   + ("" if required else " (default paper-b200)"))


def _float(field, text, allow_zero=False):
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(field, text, "must be a number") from None
    require_positive(field, value, allow_zero=allow_zero)
    return value


def burst_model(platform, producers: int, bytes_per_producer: int, gap_us: float) -> dict:
    """All Sec. 3 quantities for one (K, B, G) on a platform, as one flat dict."""
    K, B, G = producers, bytes_per_producer, gap_us
    V = K * B
    R = platform.drain_rate_Bpus
    t0 = platform.issue_time0_us(K, B)
    Q = platform.capacity_bytes(K)
    test = model.design_test(G, t0, V, R, Q)
    t_iss = model.issue_time_with_capacity_us(G, t0, V, R, Q)
    return {
        "platform": platform.name, "producers": K, "bytes_per_producer": B, "gap_us": G,
        "volume_MiB": V / MiB, "R_GBps": platform.drain_rate_GBps, "Q_MiB": Q / MiB, "T_iss0_us": t0,
        # exact steady state of the fluid queue (what `xstage sim bursts` converges to), V > Q included
        "T_iss_us": t_iss,
        "delta_T_iss_us": t_iss - t0,
        "T_iss_with_capacity_us": t_iss,
        "T_iss_eq3_us": model.issue_time_us(G, t0, V, R),
        "G_star_us": model.recovery_gap_us(t0, V, R),
        "period_us": model.periodic_period_us(G, t0, V, R, Q),
        "period_eq2_us": model.period_us(G, t0, V, R),
        "warmup_bursts": model.warmup_bursts(G, t0, V, R, Q),
        "T_iss_coupled_us": model.coupled_issue_time_us(t0, V, R),
        "period_coupled_us": model.coupled_period_us(G, V, R, t0),
        "drain_period_us": model.drain_period_us(V, R),
        "q_peak0_MiB": model.peak_outstanding_bytes(t0, V, R) / MiB,
        "T_iss_iso_us": model.isolated_issue_time_us(t0, V, R, Q),
        "period_iso_us": model.isolated_period_us(G, t0, V, R),
        "injection_GBps": test.injection_rate_Bpus / 1e3,
        "rate_bound_ok": test.rate_bound_ok,
        "capacity_bound_ok": test.capacity_bound_ok,
    }


def run_model(args) -> int:
    from xstage.cli import print_json, print_table

    if args.producers is None or args.bytes_per_producer is None:
        missing = "--producers" if args.producers is None else "--bytes-per-producer"
        raise InputError(missing, None, "is required (or use `xstage model fa ...`)")
    platform = load_platform(args.platform)
    K = platform.check_producers(require_int("producers", args.producers))
    B = parse_size(args.bytes_per_producer, "bytes_per_producer")
    G = _float("gap_us", args.gap_us, allow_zero=True)
    out = burst_model(platform, K, B, G)
    print_json(out) if args.json else print_table(out)
    return 0


def fa_model(platform, producers, block_m, block_n, head_dim, out_bytes, sigma_us) -> dict:
    B = model.fa_tile_bytes(block_m, head_dim, out_bytes)
    V = producers * B
    R = platform.drain_rate_Bpus
    t0 = platform.issue_time0_us(producers, B)
    Q = platform.capacity_bytes(producers)
    g_star = model.recovery_gap_us(t0, V, R)
    peak = model.peak_outstanding_bytes(t0, V, R)
    return {
        "platform": platform.name, "producers": producers, "block_m": block_m, "block_n": block_n,
        "head_dim": head_dim, "out_bytes": out_bytes, "sigma_us": sigma_us,
        "tile_KiB": B / 1024, "burst_MiB": V / MiB, "T_iss0_us": t0, "Q_MiB": Q / MiB,
        "q_peak0_MiB": peak / MiB, "capacity_bound_ok": peak <= Q,
        "G_star_us": g_star,
        "M_ub_star_tokens": model.fa_seq_upper_bound_tokens(block_n, g_star, sigma_us),
    }


def run_model_fa(args) -> int:
    from xstage.cli import print_json, print_table

    platform = load_platform(args.platform)
    K = platform.check_producers(require_int("producers", args.producers))
    ints = {name: require_int(name.replace("_", "-"), getattr(args, name))
            for name in ("block_m", "block_n", "head_dim", "out_bytes")}
    sigma = _float("sigma_us", args.sigma_us)
    out = fa_model(platform, K, ints["block_m"], ints["block_n"], ints["head_dim"], ints["out_bytes"], sigma)
    print_json(out) if args.json else print_table(out)
    return 0


def run_sim_bursts(args) -> int:
    from xstage.cli import print_json, print_table
    from xstage.provenance import provenance
    from xstage.records import save_records
    from xstage.sim.bursts import BurstConfig, simulate_bursts

    platform = load_platform(args.platform)
    cfg = BurstConfig(
        producers=platform.check_producers(require_int("producers", args.producers)),
        bytes_per_producer=parse_size(args.bytes_per_producer, "bytes_per_producer"),
        gap_us=_float("gap_us", args.gap_us, allow_zero=True),
        bursts=require_int("bursts", args.bursts, minimum=2),
        mode=args.mode, queue=args.queue, chunk_bytes=parse_size(args.chunk, "chunk"),
        skip=None if args.skip is None else require_int("skip", args.skip, minimum=0), engine=args.engine)
    if args.out and not str(args.out).endswith((".parquet", ".csv")):
        raise InputError("--out", args.out, "must end in .parquet or .csv")
    result = simulate_bursts(platform, cfg, record_occupancy=False)
    summary = result.summary(platform)
    if args.out:
        meta = {"config": summary, "platform": platform.to_dict(), "platform_hash": platform.content_hash,
                "provenance": provenance()}
        save_records(args.out, "burst", result.bursts, meta, overwrite=args.overwrite)
        summary["out"] = str(args.out)
    print_json(summary) if args.json else print_table(summary)
    return 0


def run_platforms(args) -> int:
    from xstage.cli import print_json, print_table

    if args.name is None:
        rows = []
        for name in bundled_platforms():
            p = load_platform(name)
            rows.append({"name": name, "sm_count": p.sm_count, "R_GBps": p.drain_rate_GBps,
                         "T_iss0_us_at_32KiB": p.issue_time0_us(p.sm_count, 32768),
                         "Q_MiB": p.capacity_bytes(p.sm_count) / MiB, "target": p.target,
                         "description": p.description})
        if args.json:
            print_json(rows)
        else:
            for r in rows:
                print(f"{r['name']:<18} {r['sm_count']:>4} SMs  R={r['R_GBps']:.1f} GB/s  "
                      f"T_iss0(32KiB)={r['T_iss0_us_at_32KiB']:.3f} us  Q={r['Q_MiB']:.3f} MiB  {r['description']}")
        return 0
    p = load_platform(args.name)
    print_json(p.to_dict()) if args.json else print_table({k: v for k, v in p.to_dict().items() if k != "notes"})
    return 0
