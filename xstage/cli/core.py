"""Core subcommands: ``xstage model``, ``xstage model fa``, ``xstage sim bursts``, ``xstage platforms``."""



from xstage.cli.common import add_json, add_out, add_platform, check_output, integer, number, print_json, print_table
from xstage.errors import InputError, require_int
from xstage.sim.platform import bundled_platforms, load_platform
from xstage.sim.scenarios import burst_model, fa_model  # noqa: F401 - re-exported for older callers
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
    add_json(p)
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
    add_json(fa)
    fa.set_defaults(func=run_model_fa)

    s = sub.add_parser("sim", help="run the simpy X-Stage simulator",
                       description="Simulate the X-Stage with simpy.")
    ssub = s.add_subparsers(dest="sim_kind", metavar="{bursts}", required=True)
    b = ssub.add_parser("bursts", help="periodic / isolated / local / coupled / lockstep burst experiment",
                        description="K producers issue B bytes each, then wait G us; repeated N times.")
    _platform_arg(b, required=True)
    b.add_argument("--producers", "-K", required=True)
    b.add_argument("--bytes-per-producer", "-B", required=True)
    b.add_argument("--gap-us", "-G", default="0")
    b.add_argument("--bursts", "-n", default="200", help="bursts per producer (default 200)")
    b.add_argument("--mode", default="periodic", help="periodic | isolated | local | coupled | lockstep (every "
                   "burst from a drained path, the next at max(drained, issue end + --barrier-us) + G)")
    b.add_argument("--queue", default="fluid", help="fluid (exact, fast) | chunked (4 KiB chunks, cross-check)")
    b.add_argument("--chunk", default="4KiB", help="chunk size for --queue chunked")
    add_out(b, "write the burst records (.parquet, or .csv with a .meta.json beside it)")
    add_json(b)
    b.add_argument("--engine", default="auto", help="auto (exact for the fluid queue) | exact (closed-form "
                   "recurrence, K identical producers) | simpy (the event-driven reference)")
    b.add_argument("--skip", default=None, help="bursts left out of the medians, counted from the first "
                   "(default: the closed-form warm-up; the summary says whether its window is steady)")
    b.add_argument("--drain-order", default="fair", help="fair (default: every held-back producer slowed by the "
                   "same factor) | ordered (fixed per-producer shares w_p = exp(-a p / (K - 1)); needs "
                   "--drain-spread, runs on simpy)")
    b.add_argument("--drain-spread", default=None, help="a >= 0 for --drain-order ordered (a = 0 is fair; "
                   "1.0 fitted on the H200 host probe, docs/calibration.md)")
    b.add_argument("--barrier-us", default=None, help="--mode lockstep: the barrier's own time in us (>= 0; the H200's "
                   "wide grids: 1.216 host, 1.10 local, docs/calibration/lockstep-drained.md)")
    b.add_argument("--start-skew-us", default=None, help="a measured start skew at this K in us (>= 0): the "
                   "last producer's start after the first, in place of the platform's skew term "
                   "(Platform.start_skew_points; docs/calibration/finite-skew.md)")
    b.set_defaults(func=run_sim_bursts)

    pl = sub.add_parser("platforms", help="list bundled platforms or show one",
                        description="List the bundled platforms, or show one platform's parameters.")
    pl.add_argument("name", nargs="?", help="platform name or .json file to show")
    add_json(pl)
    pl.set_defaults(func=run_platforms)


def _platform_arg(p, required):
    add_platform(p, required=required)


def _float(field, text, allow_zero=False):
    return number(field, text, minimum=0, allow_equal=allow_zero)


def run_model(args) -> int:
    if args.producers is None or args.bytes_per_producer is None:
        missing = "--producers" if args.producers is None else "--bytes-per-producer"
        raise InputError(missing, None, "is required (or use `xstage model fa ...`)")
    platform = load_platform(args.platform)
    K = platform.check_producers(require_int("producers", args.producers))
    B = parse_size(args.bytes_per_producer, "bytes_per_producer")
    G = _float("gap_us", args.gap_us, allow_zero=True)
    out = {**burst_model(platform, K, B, G), **knee_band(platform, K, B)}
    print_json(out) if args.json else print_table(out)
    return 0


KNEE_BAND_RECORD = "calibration-extra/knee-band28.json"   # knee-band26 with every later H100 host folder (session 28)


def knee_band(platform, K: int, B: int) -> dict:
    """``knee_ratio`` of (K, B) under the platform and, for a host platform, how often committed host platforms missed
    lockstep pairs they never saw at that knee ratio, per GPU model (``knee_band_<GPU>_share_off`` of
    ``knee_band_<GPU>_pairs`` pairs had a point off by > 15 %; the record of ``benchmarks/calib_knee_band25.py
    --session28``, absent where the records are not installed)."""
    import json

    from xstage.paths import data_dir
    from xstage.sim.heldout_misses import knee_ratio
    from xstage.sim.knee_band import band_rows

    ratio = knee_ratio(platform, K, B)
    out = {"knee_ratio": ratio}
    path = data_dir() / KNEE_BAND_RECORD
    if platform.target != "host" or not path.is_file():
        return out
    rows = band_rows(json.loads(path.read_text()), ratio)
    for gpu, row in rows.items():
        out["knee_band"] = row["bin"]
        out[f"knee_band_{gpu}_pairs"] = row["pairs"]
        out[f"knee_band_{gpu}_share_off"] = row["share_off"]
    return out


def run_model_fa(args) -> int:
    platform = load_platform(args.platform)
    K = platform.check_producers(require_int("producers", args.producers))
    ints = {name: require_int(name.replace("_", "-"), getattr(args, name))
            for name in ("block_m", "block_n", "head_dim", "out_bytes")}
    sigma = _float("sigma_us", args.sigma_us)
    out = fa_model(platform, K, ints["block_m"], ints["block_n"], ints["head_dim"], ints["out_bytes"], sigma)
    print_json(out) if args.json else print_table(out)
    return 0


def run_sim_bursts(args) -> int:
    from xstage.provenance import provenance
    from xstage.records import save_records
    from xstage.sim.bursts import BurstConfig, simulate_bursts

    platform = load_platform(args.platform)
    producers = require_int("producers", args.producers)
    if args.start_skew_us is not None:          # a measured skew at this K replaces the skew term
        from dataclasses import replace
        skew = number("--start-skew-us", args.start_skew_us, minimum=0, allow_equal=True)
        platform = replace(platform, start_skew_points=((producers, skew),))
    cfg = BurstConfig(
        producers=platform.check_producers(producers),
        bytes_per_producer=parse_size(args.bytes_per_producer, "bytes_per_producer"),
        gap_us=_float("gap_us", args.gap_us, allow_zero=True),
        bursts=require_int("bursts", args.bursts, minimum=2),
        mode=args.mode, queue=args.queue, chunk_bytes=parse_size(args.chunk, "chunk"),
        skip=None if args.skip is None else integer("--skip", args.skip, minimum=0), engine=args.engine,
        drain_order=args.drain_order,
        drain_spread=None if args.drain_spread is None else number("--drain-spread", args.drain_spread, minimum=0,
                                                                   allow_equal=True),
        barrier_us=None if args.barrier_us is None else number("--barrier-us", args.barrier_us, minimum=0,
                                                               allow_equal=True))
    if args.out:
        out = check_output("--out", args.out, overwrite=args.overwrite, suffixes=(".parquet", ".csv"))
        if out.suffix == ".csv":  # its metadata goes beside it: never clobbered either
            check_output("--out", out.with_suffix(".meta.json"), overwrite=args.overwrite)
    result = simulate_bursts(platform, cfg, record_occupancy=False)
    summary = result.summary(platform)
    if platform.start_skew_points is not None and args.start_skew_us is not None:
        summary["start_skew_us"] = platform.start_skew_points[0][1]   # the measured skew it ran with
    if args.out:
        meta = {"config": summary, "platform": platform.to_dict(), "platform_hash": platform.content_hash,
                "provenance": provenance()}
        save_records(args.out, "burst", result.bursts, meta, overwrite=args.overwrite)
        summary["out"] = str(args.out)
    print_json(summary) if args.json else print_table(summary)
    return 0


def run_platforms(args) -> int:
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
