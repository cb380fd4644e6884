"""Schedule subcommands: ``xstage sweep``, ``xstage advise``, ``xstage replay``, ``xstage schedule export``."""

from pathlib import Path

from xstage.cli.common import (add_command, add_json, add_out, add_platform, add_quiet, atomic_output,
                               check_output, int_list, integer, number, print_json, print_table, progress_enabled)
from xstage.errors import InputError, require_int
from xstage.sim.platform import load_platform


MAX_JOBS = 256  # local worker processes


def register(sub):
    sw = add_command(sub, "sweep", run_sweep, "replay a whole workload catalog (MoE 84 configs, or FA shapes x M)")
    sw.add_argument("kind", choices=("moe", "fa"), help="which catalog")
    _platform(sw)
    sw.add_argument("--jobs", "-j", default="2", help="local worker processes (default 2; 1 = in this process)")
    sw.add_argument("--scheduler", default=None, help="Dask distributed scheduler address (tcp://host:8786)")
    sw.add_argument("--configs", nargs="*", default=None,
                    help="moe: only these MODEL/PRECISION/ROUTING/SETTING names (default: all 84)")
    sw.add_argument("--wave-imbalance", default=None,
                    help="moe: expert-wave size heuristic, L1 tiles per wave in SM counts (default 16; "
                    "DeepGEMM's factor is about 4)")
    add_out(sw, "output records (.parquet or .csv), kind 'summary'", required=True)
    add_json(sw, "print the summary as JSON")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar (there is none unless stderr "
                    "is a terminal)")
    add_quiet(sw)

    ad = add_command(sub, "advise", run_advise, "recommend a MoE schedule (expert-wave / interleaved D / staging depth)")
    _platform(ad)
    ad.add_argument("--config", required=True,
                    help="MODEL[/PRECISION[/ROUTING[/SETTING]]], e.g. DSv4-Pro/w8a8/skewed/L")
    ad.add_argument("--leads", default=None,
                    help="comma-separated leads D to try (default 1, D_knee/2, D_knee, 2 and 4 x D_knee)")
    ad.add_argument("--slots", default="1,2", help="comma-separated staging depths to try (default 1,2)")
    ad.add_argument("--num-sms", default=None, help="programs (default: the platform's SMs, rounded down to even)")
    ad.add_argument("--l2-cache-MiB", default=None, help="L2 cache for the locality penalty (default per platform)")
    add_json(ad)

    rp = sub.add_parser("replay", help="replay one fused kernel and print its summary",
                        description="Replay one MoE configuration with one schedule, or one FlashAttention shape, "
                        "on the shared X-Stage; optionally write the per-tile records.")
    rsub = rp.add_subparsers(dest="replay_kind", metavar="{moe,fa}", required=True)
    rm = rsub.add_parser("moe", help="one MoE configuration and schedule")
    _platform(rm)
    rm.add_argument("--config", required=True, help="MODEL[/PRECISION[/ROUTING[/SETTING]]]")
    rm.add_argument("--schedule", default="interleaved", help="expert_wave | interleaved (default)")
    rm.add_argument("--lead", default=None, help="interleaved lead D in rows (default max(1, D_knee))")
    rm.add_argument("--slots", default="2", help="staging slots (default 2; 0 = epilogue in series)")
    rm.add_argument("--coupled", action="store_true", help="completion-coupled counterfactual")
    rm.add_argument("--l1-us", default=None, help="override the Linear-1 tile mainloop time (us)")
    rm.add_argument("--l2-us", default=None, help="override the Linear-2 tile mainloop time (us)")
    rm.add_argument("--num-sms", default=None, help="programs (default: platform SMs, rounded down to even)")
    rm.add_argument("--engine", default="fast", help="fast (default) | simpy (reference, slower)")
    add_out(rm, "write the tile records (.parquet or .csv)")
    add_json(rm)
    rm.set_defaults(func=run_replay_moe)
    rf = rsub.add_parser("fa", help="one FlashAttention shape and sequence length")
    _platform(rf)
    rf.add_argument("--shape", default="fa4", help="fa3 | fa4 (default)")
    rf.add_argument("--seq-len", "-M", required=True, help="sequence length M")
    rf.add_argument("--heads", default=None, help="heads per rank (default from the catalog)")
    pr = rf.add_argument_group("predict a kernel from the outside (any of these uses xstage.sim.predict; "
                               "tile sizes default to --shape's)")
    pr.add_argument("--head-dim", default=None, help="head dimension d")
    pr.add_argument("--block-m", default=None, help="query rows per output tile b_m")
    pr.add_argument("--block-n", default=None, help="K/V columns per mainloop step b_n")
    pr.add_argument("--world-size", default=None, help="Ulysses ranks W (default 8)")
    pr.add_argument("--rank", default=None, help="this rank; its own sequence chunk stays local (default 0)")
    pr.add_argument("--remote-fraction", default=None,
                    help="share of every tile's bytes that crosses the X-Stage (default: the Ulysses layout, "
                    "own chunk local, (W-1)/W of the tiles remote)")
    pr.add_argument("--fa-us", default=None, help="measured FA-only time (us); the per-tile Q-loop is derived "
                    "from it (default: the platform's tensor rate)")
    pr.add_argument("--send", default=None, help="tile_end (default: each tile sent when its Q-loop ends) | stagger")
    pr.add_argument("--exit-waits-for-drain", action="store_true",
                    help="the SM-side stage: a tile's bytes leave its SM at r_sm into a small shared buffer and "
                    "the SM's next tile waits for them (defaults from the MoE tile logs)")
    pr.add_argument("--sm-store-GBps", default=None, help="r_sm with --exit-waits-for-drain (default 1.065)")
    pr.add_argument("--shared-buffer-MiB", default=None, help="Q_eff with --exit-waits-for-drain (default 0.78)")
    pr.add_argument("--order", default=None, help="tile order: head_major (default) | local_last (the own chunk's "
                    "tiles last, as the project's Triton kernel)")
    pr.add_argument("--tail-parts", default=None, help="the fused kernel's split tail: K/V parts per tile of the "
                    "last, partial wave (default 1: no split)")
    pr.add_argument("--fa-tail-parts", default=None, help="the same for the FA-only kernel that --fa-us timed "
                    "(default 1)")
    pr.add_argument("--program-spread", default=None, help="full range of the fused kernel's per-program Q-loop "
                    "speeds, as a share (a tile log's per-wave growth of the end-time range over the Q-loop; "
                    "default 0)")
    pr.add_argument("--fa-program-spread", default=None, help="the same for the FA-only kernel (default: "
                    "--program-spread)")
    pr.add_argument("--sm-pool-GBps", default=None, help="a rate the SMs' stores share: an issue that starts "
                    "while n others issue gets at most this / (n + 1) (default: none)")
    pr.add_argument("--mainloop-factor", default=None, help="the fused kernel's Q-loop over the FA-only kernel's, "
                    "before any remote store (its own code; default 1)")
    pr.add_argument("--send-step-offset", default=None, help="K/V steps added to --send stagger's due step "
                    "(p mod 16) * n // 32 (default 0: the Triton kernel; 1: the persistent FA4 stagger kernel)")
    pr.add_argument("--hold", default=None, help="where a store holds its SM: issue (the next mainloop waits for "
                    "its bytes to leave; default) or next_epilogue (only at the next epilogue: the persistent FA4 "
                    "kernels' code)")
    pr.add_argument("--stagger-span", default=None, help="--send stagger's sends spread over 1 / span of the window "
                    "(default 2: its first half; 1: the whole, FA4's stagger1 kernels)")
    pr.add_argument("--due-over", default=None, help="what the stagger's due step counts: tile (the next tile's K/V "
                    "steps; default) | unit (the next unit's: FA4's split kernels) | window (the K/V steps until the "
                    "program next stages a tile: staggersplitw)")
    pr.add_argument("--stall-backlog-MB", default=None, help="the global-stall model instead of the replay "
                    "(xstage.sim.predict_congestion): every SM stalls while the host link's backlog exceeds this "
                    "(MB; q_c, 0.35 from the FA4 tile log); with --fa-us the no-link build's time and "
                    "--program-spread its drift, E_res is the link cost (rule 14: 0.35 and 0.017 for the Triton "
                    "split kernel, docs/calibration/attention-rule14.md)")
    pr.add_argument("--drift-log", default=None, metavar="FILE", help="with --stall-backlog-MB: both drifts from the "
                    "no-link build's per-wave tile log (.parquet or .csv: wave, tiles, end_p10(us), end_p90(us), "
                    "qloop_p50(us); an in-pair inpair-wave.parquet: its split_hbm launches of this M, heads, "
                    "head_dim, block_n) by rule 17: 0.00573 + 0.57 x the log's drift "
                    "(docs/calibration/attention-rule17.md)")
    add_json(rf)
    rf.set_defaults(func=run_replay_fa)

    rr = add_command(sub, "reproduce", run_reproduce, "reproduce the paper's Table 2 (per-tile span and stall) on a platform")
    rr.add_argument("what", choices=("table2",), help="which result")
    _platform(rr)
    rr.add_argument("--slots", default="2", help="staging slots (default 2)")
    add_json(rr)

    sc = sub.add_parser("schedule", help="export schedule arrays for the GPU kernels",
                        description="Write a schedule's int32 arrays (tiles [T, 8], sm_offsets [num_sms + 1]) "
                        "to an .npz file that the hardware kernels walk.")
    ssub = sc.add_subparsers(dest="schedule_cmd", metavar="{export}", required=True)
    ex = add_command(ssub, "export", run_export, "write tiles + sm_offsets to .npz")
    ex.add_argument("--schedule", required=True, help="expert_wave | interleaved | fa_qloop")
    ex.add_argument("--config", default=None, help="catalog configuration (platform SMs from --platform)")
    _platform(ex)
    ex.add_argument("--tokens-per-expert", default=None, help="comma-separated tokens of each local expert")
    ex.add_argument("--hidden", default=None)
    ex.add_argument("--intermediate", default=None)
    ex.add_argument("--block-m", default="128")
    ex.add_argument("--block-n", default="128")
    ex.add_argument("--heads", default=None, help="fa_qloop: heads")
    ex.add_argument("--seq-len", default=None, help="fa_qloop: sequence length")
    ex.add_argument("--lead", default=None, help="interleaved lead D (default max(1, D_knee) or 1)")
    ex.add_argument("--wave-experts", default=None, help="expert_wave: experts per wave (default heuristic)")
    ex.add_argument("--num-sms", default=None, help="programs (default: platform SMs, rounded down to even)")
    add_out(ex, "output .npz", required=True)
    add_json(ex)


def _platform(p):
    add_platform(p)


def _ints(field, text, minimum=0):
    found = int_list(field, text, minimum=minimum)
    return None if found is None else list(found)


def _float(field, text):
    """An optional positive time or size (None: the default)."""
    return number(field, text, minimum=0, allow_equal=False)


def _sms(args, platform, *, even=True):
    """--num-sms: <= the platform's SMs; for the MoE kernels an even number >= 2 (CTA pairs)."""
    if args.num_sms is None:
        n = platform.sm_count
    else:
        n = require_int("num_sms", args.num_sms, minimum=2 if even else 1, maximum=platform.sm_count)
        if even and n % 2:
            raise InputError("num_sms", args.num_sms, "must be even (CTA pairs)")
    return n - (n % 2) if even else n


def _progress(enabled, total_hint):
    if not enabled:
        return None, None
    import sys

    from tqdm import tqdm
    bar = tqdm(total=total_hint, file=sys.stderr, unit="cfg", dynamic_ncols=True)

    def tick(done, total):
        bar.total = total
        bar.n = done
        bar.refresh()
    return bar, tick


def run_sweep(args) -> int:
    """Replay every configuration of a catalog and write one row per configuration. moe: expert-wave vs interleaved
    (lead D = max(1, D_knee)) for the paper's 84 MoE configurations; fa: FA-only, X-Stage-fused and
    completion-coupled replays of the FA3/FA4 shapes at M = 8K..64K. Runs on local cores, or on a Dask cluster
    with --scheduler."""
    from xstage.provenance import provenance
    from xstage.records import save_records
    from xstage.records.spelling import column_name
    from xstage.sim.sweep import summarize_fa, summarize_moe, sweep
    from xstage.sim.workloads.catalog import parse_config
    import re

    platform = load_platform(args.platform)
    jobs = require_int("--jobs", args.jobs, maximum=MAX_JOBS)
    if args.scheduler is not None and not re.fullmatch(r"([a-z]+://)?[\w.\-\[\]:]+:\d{1,5}", args.scheduler):
        raise InputError("--scheduler", args.scheduler, "must be a scheduler address such as tcp://host:8786")
    out = check_output("--out", args.out, overwrite=args.overwrite, suffixes=(".parquet", ".csv"))
    configs = None
    if args.configs is not None:
        if args.kind != "moe":
            raise InputError("--configs", args.configs, "only applies to sweep moe")
        configs = [parse_config(c).name for c in args.configs]
        if not configs:
            raise InputError("--configs", args.configs, "must name at least one configuration")
    kw = {}
    if args.wave_imbalance is not None:
        if args.kind != "moe":
            raise InputError("--wave-imbalance", args.wave_imbalance, "only applies to sweep moe")
        kw["wave_imbalance"] = number("--wave-imbalance", args.wave_imbalance, minimum=0, allow_equal=False)
    bar, tick = _progress(progress_enabled(args), 84 if args.kind == "moe" else 10)
    try:
        frame = sweep(args.kind, platform, jobs=jobs, scheduler=args.scheduler, configs=configs, progress=tick,
                      **kw)
    finally:
        if bar is not None:
            bar.close()
    summary = summarize_moe(frame) if args.kind == "moe" else summarize_fa(frame)
    meta = {"config": {"kind": args.kind, "platform": platform.name, "configs": configs, "jobs": jobs,
                       "scheduler": args.scheduler, **kw},
            "platform_hash": platform.content_hash, "platform": platform.to_dict(),
            "provenance": provenance(with_gpu=False), "summary": summary}
    save_records(out, "summary", frame.rename(columns=column_name), meta, table=f"{args.kind}_sweep",
                 overwrite=args.overwrite)
    if args.json:
        print_json(summary)
    else:
        flat = {k: v for k, v in summary.items() if not isinstance(v, dict)}
        print_table({**flat, "out": str(out)})
    return 0


def run_advise(args) -> int:
    """Replay expert-wave and interleaved over a range of leads D and staging depths, charge a cache-locality
    penalty for the larger cross-expert weight working set, and recommend one, with the design-test verdicts
    (Eq. 10, Eq. 14, D_knee) and the reason."""
    from xstage.sim.advisor import advise
    platform = load_platform(args.platform)
    leads = _ints("--leads", args.leads)
    slots = _ints("--slots", args.slots)
    res = advise(platform, args.config, leads=leads, slots=slots, num_sms=_sms(args, platform),
                 l2_cache_MiB=_float("--l2-cache-MiB", args.l2_cache_MiB))
    if args.json:
        print_json(res)
        return 0
    best = res["recommendation"]
    print_table({"config": res["config"], "platform": res["platform"],
                 "recommend": f"{best['schedule']}" + (f" D={best['lead_rows']}" if best["lead_rows"] else "")
                 + f" slots={best['staging_slots']}",
                 "predicted makespan (us)": best["adjusted_us"],
                 "speedup vs expert-wave": res["speedup_vs_expert_wave"],
                 "Eq.10 rate bound (wave)": "holds" if res["design"]["eq10_rate_ok_wave"] else "violated",
                 "Eq.10 capacity bound": "holds" if res["design"]["eq10_capacity_ok"] else "violated",
                 "Eq.14 interleaving sufficient": "yes" if res["design"]["eq14_interleaving_sufficient"] else "no",
                 "D_knee (rows)": res["design"]["D_knee"]})
    print()
    print(f"{'schedule':<12} {'D':>3} {'slots':>5} {'makespan(us)':>13} {'WS(MiB)':>8} {'penalty':>8} "
          f"{'adjusted(us)':>13}")
    for c in res["candidates"]:
        print(f"{c['schedule']:<12} {c['lead_rows'] if c['lead_rows'] else '-':>3} {c['staging_slots']:>5} "
              f"{c['makespan_us']:>13.1f} {c['working_set_MiB']:>8.0f} {c['locality_penalty']:>8.3f} "
              f"{c['adjusted_us']:>13.1f}")
    print()
    print(res["reason"])
    return 0


def run_replay_moe(args) -> int:
    from xstage.provenance import provenance
    from xstage.records import save_records
    from xstage.sim.replay import replay
    from xstage.sim.sweep import moe_replay_config
    from xstage.sim.workloads.catalog import moe_workload, parse_config
    platform = load_platform(args.platform)
    if args.out:
        check_output("--out", args.out, overwrite=args.overwrite, suffixes=(".parquet", ".csv"))
    cfg = parse_config(args.config)
    sms = _sms(args, platform)
    over = {k: v for k, v in (("L1", _float("--l1-us", args.l1_us)), ("L2", _float("--l2-us", args.l2_us)))
            if v is not None}
    w = moe_workload(cfg, platform, num_sms=sms, mainloop_override_us=over or None)
    lead = require_int("--lead", args.lead, minimum=0) if args.lead is not None else None
    s = w.schedule(args.schedule, sms, lead_rows=lead)
    rc = moe_replay_config(w, staging_slots=require_int("--slots", args.slots, minimum=0), coupled=args.coupled,
                           engine=args.engine)
    r = replay(s, w.mainloop_us(s), w.remote_bytes(s), platform, rc)
    summary = {"config": cfg.name, "platform": platform.name, **r.summary(), "params": s.params,
               "l1_us": w.l1_us, "l2_us": w.l2_us, "wall_s": r.wall_s}
    if args.out:
        meta = {"config": {"moe": cfg.name, "schedule": s.name, "params": s.params, "replay": vars(rc)},
                "platform_hash": platform.content_hash, "provenance": provenance(with_gpu=False),
                "summary": summary}
        save_records(args.out, "tile", r.tiles(experiment="moe_replay", config=cfg.name), meta,
                     overwrite=args.overwrite)
    if args.json:
        print_json(summary)
    else:
        print_table({k: v for k, v in summary.items() if not isinstance(v, dict)})
    return 0


PREDICT_FLAGS = ("head_dim", "block_m", "block_n", "world_size", "rank", "remote_fraction", "fa_us", "send",
                 "sm_store_GBps", "shared_buffer_MiB", "order", "tail_parts", "fa_tail_parts", "program_spread",
                 "fa_program_spread", "mainloop_factor", "sm_pool_GBps", "send_step_offset", "hold", "stagger_span", "due_over")


def _fa_kernel(args):
    """The FaKernel that ``replay fa``'s predictor flags describe (tile sizes default to --shape's)."""
    from xstage.sim.predict import HOLDS, SENDS, FaKernel
    from xstage.sim.predict_sends import DUE_OVER
    from xstage.sim.schedule_fa import ORDERS
    from xstage.sim.workloads.catalog import fa_catalog
    shapes = fa_catalog()["shapes"]
    if args.shape not in shapes:
        raise InputError("--shape", args.shape, f"must be one of {', '.join(shapes)}")
    s = shapes[args.shape]
    if args.send is not None and args.send not in SENDS:
        raise InputError("--send", args.send, f"must be one of {', '.join(SENDS)}")
    if args.hold is not None and args.hold not in HOLDS:
        raise InputError("--hold", args.hold, f"must be one of {', '.join(HOLDS)}")
    if args.due_over is not None and args.due_over not in DUE_OVER:
        raise InputError("--due-over", args.due_over, f"must be one of {', '.join(DUE_OVER)}")
    if args.order is not None and args.order not in ORDERS:
        raise InputError("--order", args.order, f"must be one of {', '.join(ORDERS)}")
    if not args.exit_waits_for_drain:
        for flag, value in (("--sm-store-GBps", args.sm_store_GBps), ("--shared-buffer-MiB", args.shared_buffer_MiB)):
            if value is not None:
                raise InputError(flag, value, "only applies with --exit-waits-for-drain")
    world = integer("--world-size", args.world_size, default=8)
    kw = dict(
        seq_len=require_int("--seq-len", args.seq_len),
        heads=integer("--heads", args.heads, default=fa_catalog()["heads_per_rank"]),
        head_dim=integer("--head-dim", args.head_dim, default=s["head_dim"]),
        block_m=integer("--block-m", args.block_m, default=s["block_m"]),
        block_n=integer("--block-n", args.block_n, default=s["block_n"]),
        out_bytes=s["out_bytes"], world_size=world,
        rank=integer("--rank", args.rank, minimum=0, maximum=world - 1, default=0),
        remote_fraction=number("--remote-fraction", args.remote_fraction, minimum=0),
        fa_us=number("--fa-us", args.fa_us, minimum=0, allow_equal=False),
        send=args.send or "tile_end", efficiency=s["efficiency"], qloop_fixed_us=s["qloop_fixed_us"],
        exit_waits_for_drain=args.exit_waits_for_drain, order=args.order or "head_major",
        tail_parts=integer("--tail-parts", args.tail_parts, default=1),
        fa_tail_parts=integer("--fa-tail-parts", args.fa_tail_parts, default=1),
        mainloop_factor=number("--mainloop-factor", args.mainloop_factor, minimum=0, allow_equal=False, default=1.0),
        sm_pool_GBps=number("--sm-pool-GBps", args.sm_pool_GBps, minimum=0, allow_equal=False),
        send_step_offset=integer("--send-step-offset", args.send_step_offset, minimum=0, default=0),
        hold=args.hold or "issue", stagger_span=integer("--stagger-span", args.stagger_span, default=2),
        due_over=args.due_over or "tile")
    for flag, field, text in (("--program-spread", "program_spread", args.program_spread),
                              ("--fa-program-spread", "fa_program_spread", args.fa_program_spread)):
        if text is not None:
            kw[field] = number(flag, text, minimum=0)
            if kw[field] >= 1:
                raise InputError(flag, text, "must be in [0, 1)")
    if kw["remote_fraction"] is not None and kw["remote_fraction"] > 1:
        raise InputError("--remote-fraction", args.remote_fraction, "must be in [0, 1]")
    for flag, field, text in (("--sm-store-GBps", "sm_store_GBps", args.sm_store_GBps),
                              ("--shared-buffer-MiB", "shared_buffer_MiB", args.shared_buffer_MiB)):
        if text is not None:
            kw[field] = number(flag, text, minimum=0, allow_equal=False)
    try:
        return FaKernel(**kw)
    except InputError as err:   # a combination (seq_len vs tiles and ranks): name the flag
        raise InputError("--" + err.field.replace("_", "-"), err.value, err.must) from None


def _drift_from_log(args, k):
    """``k`` with both programs' drifts read from ``--drift-log`` by rule 17, and the keys it adds to the answer."""
    from dataclasses import replace

    import pandas as pd

    from xstage.sim.predict_link import log_drift
    for flag, value in (("--program-spread", args.program_spread), ("--fa-program-spread", args.fa_program_spread)):
        if value is not None:
            raise InputError(flag, value, "does not apply with --drift-log (the log gives the drift)")
    path = Path(args.drift_log)
    if path.suffix not in (".parquet", ".csv"):
        raise InputError("--drift-log", args.drift_log, "must end in .parquet or .csv")
    if not path.is_file():
        raise InputError("--drift-log", args.drift_log, "is not a file")
    try:
        waves = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as err:   # a file pandas cannot read: one line naming it
        raise InputError("--drift-log", args.drift_log, f"cannot be read ({type(err).__name__})") from None
    try:
        d = log_drift(waves, k)
    except InputError as err:
        raise InputError(f"--drift-log {args.drift_log}: {err.field}", err.value, err.must) from None
    return (replace(k, program_spread=d["drift"], fa_program_spread=d["drift"]),
            {"drift_log_D_nl": d["D_nl"], "drift_log_launches": d["launches"], "drift": d["drift"]})


def run_replay_fa(args) -> int:
    from xstage.sim.sweep import run_fa_config
    platform = load_platform(args.platform)
    if args.stall_backlog_MB is not None:
        from xstage.sim.predict_congestion import predict_congested
        q_c = number("--stall-backlog-MB", args.stall_backlog_MB, minimum=0)
        for flag, value in (("--exit-waits-for-drain", args.exit_waits_for_drain or None), ("--hold", args.hold),
                            ("--sm-pool-GBps", args.sm_pool_GBps)):
            if value is not None:
                raise InputError(flag, value, "does not apply with --stall-backlog-MB (the global-stall model)")
        k, extra = _fa_kernel(args), {}
        if args.drift_log is not None:
            k, extra = _drift_from_log(args, k)
        row = {"model": "global_stall", **predict_congested(k, platform, q_c * 1e6), **extra,
               "platform": platform.name}
    elif args.drift_log is not None:
        raise InputError("--drift-log", args.drift_log, "needs --stall-backlog-MB (rule 17 is the global-stall model)")
    elif args.exit_waits_for_drain or any(getattr(args, f) is not None for f in PREDICT_FLAGS):
        from xstage.sim.predict import predict_fa
        row = predict_fa(_fa_kernel(args), platform)
    else:
        row = run_fa_config(args.shape, require_int("--seq-len", args.seq_len), platform,
                            heads=integer("--heads", args.heads))
    if args.json:
        print_json(row)
    else:
        print_table(row)
    return 0


def run_reproduce(args) -> int:
    """Replay the paper's Table 2 setting (W8A8, skewed, 55,808 tokens) for the seven models with the paper's own
    L2/L1 mainloop medians; print spans, Eq. 15 stall predictions and the replay's MMA-side stalls beside the
    paper's numbers (docs/reproduction.md)."""
    from xstage.sim.reproduce import table2
    frame = table2(load_platform(args.platform), slots=require_int("--slots", args.slots, minimum=0))
    if args.json:
        print_json(frame.to_dict(orient="records"))
        return 0
    print(f"{'model':<11} {'span wave/int (us)':>19} {'paper':>12} {'dt wave pred/meas':>18} {'paper':>12} "
          f"{'dt int':>10} {'speedup':>8}")
    for r in frame.to_dict(orient="records"):
        print(f"{r['model']:<11} {r['span_wave_us']:>9.2f} /{r['span_int_us']:>6.2f}   {r['paper_span_wave_us']:>5.2f}/"
              f"{r['paper_span_int_us']:<5.2f} {r['pred_wave_us']:>9.2f} /{r['meas_wave_us']:>5.2f}  "
              f"{r['paper_pred_wave_us']:>5.2f}/{r['paper_meas_wave_us']:<5.2f} "
              f"{r['pred_int_us']:>4.2f}/{r['meas_int_us']:<4.2f}"
              f" {r['speedup']:>8.3f}")
    return 0


def run_export(args) -> int:
    """MoE: from a catalog --config, or from an explicit shape (--tokens-per-expert, --hidden, --intermediate). FA:
    --schedule fa_qloop with --heads and --seq-len."""
    from xstage.sim import model
    from xstage.sim.schedule_fa import fa_qloop
    from xstage.sim.schedules import make_moe_schedule, moe_grid
    from xstage.sim.workloads.catalog import moe_workload, parse_config
    platform = load_platform(args.platform)
    out = check_output("--out", args.out, overwrite=args.overwrite, suffixes=(".npz",))
    lead = require_int("--lead", args.lead, minimum=0) if args.lead is not None else None
    if args.schedule == "fa_qloop":
        if args.heads is None or args.seq_len is None:
            raise InputError("--heads/--seq-len", (args.heads, args.seq_len), "are required for fa_qloop")
        s = fa_qloop(require_int("--heads", args.heads), require_int("--seq-len", args.seq_len),
                     _sms(args, platform, even=False), block_m=require_int("--block-m", args.block_m))
    elif args.schedule not in ("expert_wave", "interleaved"):
        raise InputError("--schedule", args.schedule, "must be expert_wave, interleaved or fa_qloop")
    elif args.config:
        w = moe_workload(parse_config(args.config), platform, num_sms=_sms(args, platform))
        waves = integer("--wave-experts", args.wave_experts)
        s = w.schedule(args.schedule, _sms(args, platform), lead_rows=lead, wave_experts=waves)
    else:
        if args.tokens_per_expert is None or args.hidden is None or args.intermediate is None:
            raise InputError("shape", None, "needs --config, or --tokens-per-expert with --hidden and --intermediate")
        grid = moe_grid(_ints("--tokens-per-expert", args.tokens_per_expert),
                        hidden=require_int("--hidden", args.hidden),
                        intermediate=require_int("--intermediate", args.intermediate),
                        block_m=require_int("--block-m", args.block_m), block_n=require_int("--block-n", args.block_n))
        sms = _sms(args, platform)
        if lead is None:
            lead = max(1, model.lead_knee_rows(require_int("--block-n", args.block_n), sms,
                                               require_int("--intermediate", args.intermediate)))
        waves = integer("--wave-experts", args.wave_experts)
        s = make_moe_schedule(args.schedule, grid, sms, lead_rows=lead, wave_experts=waves)
    with atomic_output(out, overwrite=args.overwrite) as tmp:
        s.save(tmp)
    info = {"out": str(out), "schedule": s.name, "tiles": int(len(s.tiles)), "num_sms": s.num_sms,
            **{k: v for k, v in s.params.items() if not isinstance(v, list)}}
    print_json(info) if args.json else print_table(info)
    return 0
