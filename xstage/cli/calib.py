"""``xstage calibrate``: measure a platform's (T_iss0, R, Q) and write a platform file.

    xstage calibrate --target host --out data/calibration/h200-pcie-host
    xstage calibrate --target local --out /tmp/calib-local --quick
    xstage calibrate --refit --overwrite --out data/calibration/h200-pcie-host   # re-fit stored points, no GPU
    xstage calibrate --refit --records data/calibration-extra/h200-pcie-host-wide --model two-stage-relax --out DIR
    xstage calibrate --refit --records NEW --pool OLD1 --pool OLD2 --model two-stage-gated2 --out DIR  # pooled fit
    xstage calibrate --target host --grid fresh15 --repeat 2 --model two-stage-lockq --split-rule bracket \
        --issue-law BROAD1 --issue-law BROAD2 --per-k-capacity --out DIR      # combo18 on a knee grid (opt-in)
    xstage calibrate --sim paper-b200 --target peer --out /tmp/sim-calib # the sweep on the simulator
    xstage calibrate --against h200-pcie-host --records DIR   # a committed platform on another run's points, no fit
    xstage calibrate --target host --grid wide --heldout-fraction 0.3 --split-seed 0 --out DIR   # issue 15
    torchrun --standalone --nproc-per-node=2 -m xstage.cli calibrate --target peer --out DIR
    xstage calibrate --target peer --self-peer --backend nvshmem --issue put-nbi --out DIR  # NVSHMEM device puts
    torchrun --standalone --nproc-per-node=8 -m xstage.cli calibrate --target peer --peer-pattern all --out DIR
"""

import os
import sys

from xstage.cli.common import (add_command, add_json, add_quiet, int_list, number, number_list,
                               print_json, print_table, progress_enabled, say, size_list)
from xstage.errors import InputError, require_int
from xstage.hw.calib.estimate import loo_text
from xstage.hw.calib.grids import GRIDS, grid_rows
from xstage.sim.platform_fit import DEFAULT_MODEL, MODELS, RECOMMENDED_MODEL, model_standing
from xstage.units import parse_size

OWN_RATES = ("median", "fit")   # --own-rate's rules (xstage.cli.calib_against.scores); the first is the default


def _ints(text, field):
    return int_list(field, text)


def _sizes(text, field):
    return size_list(field, text)


def _floats(text, field):
    return number_list(field, text, minimum=0, allow_equal=False)


def register(sub):
    p = add_command(sub, "calibrate", run, "measure T_iss0, R, Q on this GPU and write a platform file")
    p.add_argument("--target", choices=("host", "local", "peer"), default=None,
                   help="host: pinned host memory mapped into the GPU (PCIe); local: this GPU's HBM (control); "
                   "peer: the next rank's GPU through torch symmetric memory (torchrun, >= 2 GPUs)")
    p.add_argument("--out", default=None, help="output folder (required unless --models or --grids)")
    p.add_argument("--name", default="", help="platform name (default: <gpu>-pcie-host / -local / -peer / -peer-a2a)")
    p.add_argument("--peer-pattern", default="next", metavar="{next,all}",
                   help="peer target only. next (default): every rank's producers store into the next rank's buffer; "
                   "all: all-to-all, each rank's K producers spread over the W-1 other ranks (producer p -> rank "
                   "(r + 1 + p mod (W-1)) mod W), every rank sending at once, ranks aligned before every trial")
    p.add_argument("--grid", default="default", metavar="{" + ",".join(GRIDS) + "}",
                   help="the (K, B) grid (default: default; recommended: wide, with --model two-stage-gated2, which meets "
                   "the held-out targets on the H200 and not on an H100, docs/calibration/newgpu22.md; the fresh "
                   "grids are each a held-out study's new pairs). --grids lists every grid with its K, B, sweeps and "
                   "page. --producers, --sizes, --gap-configs, --iso-producers and --iso-sizes override it")
    p.add_argument("--heldout-fraction", type=str, default=None, metavar="F",
                   help="share of (K, B) pairs held out of the fit and checked separately (0 <= F < 1; default "
                   "0.3 for a sweep; --refit keeps the recorded split unless F is given; 0: fit on every point)")
    p.add_argument("--split-seed", type=str, default="0", metavar="S", help="seed of the held-out split (default 0)")
    p.add_argument("--split-rule", default=None, metavar="{pairs,sweeps,bracket}",
                   help="rule of the held-out split (default pairs: per K the smallest and largest B fitted; sweeps: "
                   "the gap sweeps split by volume; bracket: pairs with every gap-swept pair also fitted, "
                   "docs/calibration/knee14.md). With --refit it makes a new split (at --heldout-fraction, default 0.3)")
    p.add_argument("--producers", default=None, help="K values of the rate/plateau grid (default: the grid's)")
    p.add_argument("--sizes", default=None, help="B values of the rate/plateau grid (default: the grid's)")
    p.add_argument("--gap-configs", default=None, help="K:B pairs of the gap sweep (default: the grid's)")
    p.add_argument("--gap-fractions", default="0.05,0.1,0.2,0.3,0.45,0.6,0.75,0.9,1.0,1.1,1.3,1.6",
                   help="gaps of the sweep, as fractions of the zero-gap period")
    p.add_argument("--iso-producers", default=None, help="K values of the isolated (capacity) sweep (default: the "
                   "grid's)")
    p.add_argument("--iso-sizes", default=None, help="B values of the isolated sweep (default: the grid's: 2, 4, 8, "
                   "12, 16, 20, 24, 28, 32, 40, 48, 64, 96, 128, 192, 256 KiB)")
    p.add_argument("--bursts", type=int, default=32, help="bursts per periodic run (medians use the second half)")
    p.add_argument("--steady", default="128MiB",
                   help="periodic runs inject at least this volume (so the queue fills: steady state)")
    p.add_argument("--max-bursts", type=int, default=2048, help="cap on bursts per periodic run")
    p.add_argument("--iso-bursts", type=int, default=6, help="bursts per isolated run (the first is dropped)")
    p.add_argument("--trials", type=int, default=5, help="trials per configuration (median)")
    p.add_argument("--settle-us", type=float, default=10.0, help="isolated mode: wait after the drain barrier")
    p.add_argument("--keep-producers", type=int, default=4,
                   help="producers per run kept in bursts.parquet (0 = all; medians always use all)")
    p.add_argument("--quick", action="store_true", help="a small sweep (smoke test): short runs, 2 trials, 5 gaps; "
                   "the default grid shrinks to K 16,132 x B 8,64 KiB, the wide grid keeps every (K, B) pair")
    p.add_argument("--no-copy", action="store_true", help="skip the copy-engine comparison")
    p.add_argument("--aligned", action="store_true",
                   help="also run the rate grid and the gap sweeps with a fence-free per-burst barrier")
    p.add_argument("--backend", default="torch", metavar="{torch,nvshmem}",
                   help="peer target only: where the symmetric buffers come from. torch (default): torch symmetric "
                   "memory; nvshmem: NVSHMEM's symmetric heap through nvshmem4py (unique-ID bootstrap over the same "
                   "torchrun launch, self-PE at world size 1); the kernels store through the peer pointers either way")
    p.add_argument("--issue", default="store", metavar="{store,put-nbi,put}",
                   help="how the producers issue (peer target, --backend nvshmem for the puts): store (default): "
                   "16-byte stores through the peer pointer; put-nbi / put: one NVSHMEM CTA-wide device put "
                   "(nvshmemx_uint32_put_nbi_block / _put_block from a Numba-CUDA kernel, quiet after the last "
                   "burst) per producer and burst; the platform file's notes say which (issue_path)")
    p.add_argument("--self-peer", action="store_true", help="peer target at world size 1 (this GPU's own buffer)")
    p.add_argument("--ring", default="256MiB",
                   help="a buffer slot is rewritten only after this many bytes of other stores (fresh addresses)")
    p.add_argument("--timeout-ms", type=float, default=2000.0, help="bound of every in-kernel spin")
    p.add_argument("--sim", default=None, metavar="PLATFORM",
                   help="run the sweep on the simulator with this platform instead of the GPU")
    p.add_argument("--model", default=None, metavar="{" + ",".join(MODELS) + "}",
                   help=f"the platform model fitted (default {DEFAULT_MODEL}; recommended: {RECOMMENDED_MODEL} with "
                   "--grid wide, docs/calibration/wide-rerun.md). --models lists every model with its standing on the "
                   "H200 and its page; --refit keeps the recorded model unless this is given")
    p.add_argument("--estimate", action="store_true", help="print how many configurations the sweep runs and how long "
                   "it should hold the GPU (a time model fitted on the committed H200 sweeps: leave-one-out error "
                   f"median {loo_text(p90=False, percent='%%')}), then exit without measuring (needs --target; no "
                   "--out)")
    p.add_argument("--grids", action="store_true", help="list the grids --grid takes, with each one's role "
                   "(default, recommended, study), what it is for, its page and its K, B and sweeps, then exit (no "
                   "--out needed; --json for the rows)")
    p.add_argument("--models", action="store_true", help="list the models --model takes, with each one's standing "
                   "(default, recommended, alternative, superseded, refuted, not qualified, opt-in), what it measured "
                   "and its page, then exit (no --out needed; --json for the rows)")
    p.add_argument("--refit", action="store_true", help="re-fit stored points (no measurement): those in --out "
                   "(rewrites its files, so needs --overwrite), or with --records SRC those in SRC, written to --out")
    p.add_argument("--records", default=None, metavar="SRC",
                   help="with --refit: the calibration folder to read (e.g. committed records; only read), the "
                   "refitted folder goes to --out; with --against: the folder whose points the platform is scored on")
    p.add_argument("--pool", action="append", default=None, metavar="SRC",
                   help="another calibration folder of the same target and GPU (repeatable): its fit half (its "
                   "recorded split's fit points; every point where it recorded none) joins this fit, less any (K, B) "
                   "pair held out here; the model check, the split and the records written stay this run's own. "
                   "Measured: it meets the held-out targets of local calibrations from a small grid; on host it "
                   "fixed the small committed grids post hoc but missed a fresh knee grid's p90 (pre-registered; "
                   "docs/calibration/knee10.md)")
    p.add_argument("--issue-law", action="append", default=None, metavar="SRC",
                   help="with --model two-stage-lockq: a broad calibration folder of the same target and GPU "
                   "(repeatable); the model is fitted on the fit halves of every SRC together and its issue law "
                   "(t_fixed, P, b0, skew, ceiling) is held fixed in this fit, everything else fitted here (combo18; "
                   "a --refit fits it only when given again). Measured on the H200's host path with "
                   "--per-k-capacity and knee10's five broad grids (data/calibration-extra/h200-pcie-host-wide, "
                   "-wide-3525cba, -fresh, -fresh2, -fresh3), pre-registered: held-out target met on fresh15 (4 of 5 "
                   "seeds), missed on fresh16 (2 of 5); on an H100 with its own wide run as SRC, met on fresh16 (5 of "
                   "5), missed on fresh15 (0 of 5); docs/calibration/combo18.md, docs/calibration/newgpu22.md")
    p.add_argument("--per-k-capacity", action="store_true",
                   help="with --model two-stage-lockq: after the fit, each K with lockstep points in the fit half "
                   "gets its own Q(K) by lockq's loss on that K's pairs (rho and the floor kept; the line's value "
                   "unless a lower loss is found); with --issue-law, combo18 (docs/calibration/combo18.md)")
    p.add_argument("--repeat", type=str, default="1", metavar="N",
                   help="measure the whole grid N times in a row and fit on the point-wise median of the runs "
                   "(default 1; every run's points go to points-runs.parquet): it takes the instrument's run-to-run "
                   "scatter out of the fit. Measured on the H200's host path with --model two-stage-lockq on small "
                   "knee grids, pre-registered: held-out target met on fresh13 (5 of 5 seeds; 3 of 5 when measured "
                   "again), missed on fresh14 (0 of 5); docs/calibration/fresh14.md. Each run is kept in "
                   "OUT/partial/run-<i> as soon as it is measured (removed once the records are written): stopped "
                   "by Ctrl-C or an error after run 1, the command names the runs kept and the --refit that fits "
                   "them (exit 130 for Ctrl-C, else nonzero); a sweep into a folder holding partial/ refuses it "
                   "unless --overwrite")
    p.add_argument("--median-with", action="append", default=None, metavar="SRC",
                   help="with --refit --records A: another run of the same grid, target and GPU (repeatable); the "
                   "fit is on the point-wise median of A and every SRC (for runs made apart; --repeat measures "
                   "several runs in one command)")
    p.add_argument("--against", action="append", default=None, metavar="PLATFORM",
                   help="a committed platform (name or platform.json; repeatable) scored, nothing fitted, on every "
                   "lockstep point: of --records SRC (no --out; nothing measured or written), or of the run this "
                   "command measures or refits. Prints issue 15's four checks on every point, the folder's held-out "
                   "half and the pairs it misses with their knee ratio: whether a platform measured on one card holds "
                   "on another (measured: H100 local yes, 4.77 / 10.80 %%; H100 host no, p90 16-26 %%; "
                   "docs/calibration/h100-broad24.md)")
    p.add_argument("--own-rate", nargs="?", const=OWN_RATES[0], default=None, choices=OWN_RATES,
                   metavar="{" + ",".join(OWN_RATES) + "}",
                   help="with --against: also score each platform with the folder's own drain rate R (everything "
                   "else carried). median (the default): on host, the median V/period of the folder's zero-gap "
                   "lockstep points, which one slow point cannot pull (call28, pre-registered); fit: the R the run "
                   "fitted. A drain-held lockstep point's T_iss is V/R minus the measured gap, so a 0.35 %% error in "
                   "R moved such points by 15-25 %% on two H100s; with their own R, pool24 missed 2 of 132 pairs far "
                   "from the knee instead of 23 (post hoc, docs/calibration/h100-broad24.md)")
    p.add_argument("--overwrite", action="store_true", help="replace files in --out")
    add_json(p, "print the summary as JSON")
    add_quiet(p)


def split_args(args, default=None):
    """(fraction, seed, rule) of --heldout-fraction / --split-seed / --split-rule, checked; ``default`` fraction
    when not given (None: no new split, unless --split-rule is given: then at the default fraction)."""
    from xstage.sim.platform_fit import DEFAULT_HELDOUT_FRACTION, check_split_args
    from xstage.sim.split_sweeps import check_split_rule
    seed = require_int("--split-seed", args.split_seed, minimum=0)
    rule = getattr(args, "split_rule", None)
    if rule is not None:
        check_split_rule(rule, "--split-rule")
    if args.heldout_fraction is None:
        if default is None and rule is not None:
            default = DEFAULT_HELDOUT_FRACTION
        return None if default is None else (default, seed, rule or "pairs")
    fraction = number("--heldout-fraction", args.heldout_fraction, minimum=0)
    if fraction >= 1:
        raise InputError("--heldout-fraction", args.heldout_fraction, "must be < 1")
    return (*check_split_args(fraction, seed), rule or "pairs")


def model_arg(args):
    """--model, checked (None when not given)."""
    if args.model is None:
        return None
    from xstage.sim.platform_fit import check_model
    return check_model(args.model, "--model")


def _pairs(text):
    pairs = []
    for item in str(text).split(","):
        if not item.strip():  # "" = no gap sweep
            continue
        if ":" not in item:
            raise InputError("--gap-configs", text, "must be K:B pairs such as 132:32KiB")
        k, b = item.split(":", 1)
        pairs.append((require_int("--gap-configs K", k.strip()), parse_size(b, "--gap-configs B")))
    return tuple(pairs)


def build_config(args):
    """The sweep's CalibConfig: the grid's fields (``hw/calib/grids.py``), the grid flags given over them, and
    --quick's short variant over both (as before). Every flag is checked, also those --quick replaces."""
    from xstage.hw.calib.calibrate import CalibConfig
    from xstage.hw.calib.grids import QUICK_GRIDS, QUICK_RUNS, grid_fields
    from xstage.sim.platform_fit import DEFAULT_HELDOUT_FRACTION, DEFAULT_MODEL
    grid = grid_fields(args.grid)
    given = {"producers": (_ints, args.producers, "--producers"), "sizes": (_sizes, args.sizes, "--sizes"),
             "gap_configs": (lambda t, f: _pairs(t), args.gap_configs, "--gap-configs"),
             "iso_producers": (_ints, args.iso_producers, "--iso-producers"),
             "iso_sizes": (_sizes, args.iso_sizes, "--iso-sizes")}
    chosen = {fld: parse(text, flag) for fld, (parse, text, flag) in given.items() if text is not None}
    for flag, value, minimum in (("--bursts", args.bursts, 2), ("--max-bursts", args.max_bursts, 2),
                                 ("--iso-bursts", args.iso_bursts, 2), ("--trials", args.trials, 1),
                                 ("--keep-producers", args.keep_producers, 0)):
        require_int(flag, value, minimum=minimum)
    if args.max_bursts < args.bursts:
        raise InputError("--max-bursts", args.max_bursts, f"must be >= --bursts ({args.bursts})")
    number("--settle-us", args.settle_us, minimum=0)
    number("--timeout-ms", args.timeout_ms, minimum=0, allow_equal=False)
    parse_size(args.ring, "--ring")
    fraction, seed, rule = split_args(args, DEFAULT_HELDOUT_FRACTION)
    model = model_arg(args) or DEFAULT_MODEL
    if args.backend != "torch":
        from xstage.hw.common.nvshmem import check_backend
        check_backend(args.backend, args.target)
    if args.issue != "store":
        from xstage.hw.microbench.puts import check_issue
        check_issue(args.issue, args.backend, args.target)
        if args.sim:
            raise InputError("--issue", args.issue, "needs the GPU (the simulator has no issue path; leave out --sim)")
    kw = dict(target=args.target, name=args.name, gap_fractions=_floats(args.gap_fractions, "--gap-fractions"),
              bursts=args.bursts, steady_bytes=parse_size(args.steady, "--steady"), max_bursts=args.max_bursts,
              iso_bursts=args.iso_bursts, trials=args.trials, settle_us=args.settle_us,
              keep_producers=args.keep_producers, copy_engine=not args.no_copy, aligned=args.aligned,
              peer_pattern=args.peer_pattern, grid=args.grid, heldout_fraction=fraction, split_seed=seed, split_rule=rule,
              model=model, repeat=require_int("--repeat", args.repeat, minimum=1))
    kw.update(grid)                     # the grid ...
    kw.update(chosen)                   # ... under the grid flags given ...
    if args.quick:                      # ... and --quick over both
        kw.update(QUICK_RUNS, **QUICK_GRIDS[args.grid])
    return CalibConfig(**kw)


def buffer_bytes(cfg, ring_bytes: int) -> int:
    """Target buffer: the address ring plus one more burst, and at least 4 copies of the biggest burst."""
    biggest = max(max(cfg.producers) * max(cfg.sizes), max(k * b for k, b in cfg.gap_configs) if cfg.gap_configs else 0,
                  max(cfg.iso_producers) * max(cfg.iso_sizes))
    return int(max(ring_bytes + biggest, 4 * biggest))


MISSES_SHOWN = 8   # the human summary lists at most this many held-out pairs that miss (--json: every one)


def miss_lines(summary: dict, limit: int = MISSES_SHOWN) -> list[str]:
    """The human block of a summary's ``heldout_misses`` (``xstage.sim.heldout_misses``): a header and the worst
    ``limit`` pairs (K, B KiB, median error, points off / points, knee ratio). [] where the summary has no such
    field (no split, an older record) or no held-out pair."""
    from xstage.sim.heldout_misses import MISS_LIMIT, verdict
    misses = summary.get("heldout_misses")
    n_pairs, kind = summary.get("heldout_n_checked_pairs"), "held-out lockstep pairs"
    if n_pairs is None:   # a record written before the field: every held-out pair, isolated-only ones too
        n_pairs, kind = summary.get("heldout_n_pairs"), "held-out pairs"
    if misses is None or not n_pairs:
        return []
    head = f"held-out pairs with a point off by > {MISS_LIMIT:.0%}: {len(misses) or 'none'} of {n_pairs} {kind}"
    first = [v] if (v := verdict(summary)) else []
    if not misses:
        return first + [head]
    lines = first + [head + (f" (the worst {limit} by |median error|; --json lists all)" if len(misses) > limit else "")]
    return lines + miss_table(misses[:limit]) + [
        "  (knee ratio (V - R T_iss0)/Q(K), V = K B: near 1 at the knee; docs/calibration/method.md)"]


def miss_table(misses: list[dict], indent: str = "  ") -> list[str]:
    """Rows of missed pairs (``heldout_misses``, also ``carried``'s over every pair) under a header: K, B KiB, median error,
    points off / points, knee ratio."""
    lines = [f"{indent}{'K':>5}  {'B(KiB)':>7}  {'median err':>10}  {'off/n':>5}  {'knee ratio':>10}"]
    for m in misses:
        ratio = "-" if m["knee_ratio"] is None else f"{m['knee_ratio']:.2f}"
        lines.append(f"{indent}{m['producers']:>5}  {m['bytes_per_producer'] / 1024:>7g}  "
                     f"{m['median_rel_err_T_iss']:>+10.1%}  {str(m['n_off']) + '/' + str(m['n_points']):>5}  "
                     f"{ratio:>10}")
    return lines


def print_summary(summary: dict) -> None:
    """A calibration summary for a person: its flat keys as a table, then the held-out pairs that miss."""
    print_table({k: v for k, v in summary.items() if not isinstance(v, dict) and k not in ("heldout_misses", "against")})
    lines = miss_lines(summary)
    if lines:
        print()
        print("\n".join(lines))


def sweep_estimate(cfg, platform=None) -> dict:
    """``hw.calib.estimate.estimate`` of ``cfg`` with its producer counts clipped to the platform's SMs."""
    from xstage.hw.calib.estimate import estimate, target_platform
    platform = platform or target_platform(cfg.target)
    return estimate(cfg.clipped(platform.sm_count), platform)


def estimate_line(e: dict) -> str:
    runs = f" x {e['repeat']} runs" if e["repeat"] > 1 else ""
    return (f"{e['configurations']} configurations{runs}; estimated about {e['total_wall_estimate_s']:.0f} s of GPU "
            f"time on an H200 like {e['platform']} (kernels {e['kernel_estimate_s'] * e['repeat']:.1f} s)")


def print_estimate(args) -> int:
    """``--estimate``: the sweep's size and its time on the GPU, from the time model; nothing is measured."""
    if args.refit:
        raise InputError("--estimate", True, "estimates a sweep: it does not go with --refit (nothing is measured)")
    if args.target is None:
        raise InputError("--target", None, "is required (host, local or peer) with --estimate")
    platform = None
    if args.sim:
        from xstage.sim.platform import load_platform
        platform = load_platform(args.sim)
    e = sweep_estimate(build_config(args), platform)
    if args.json:
        print_json(e)
    else:
        print_table(e)
        print(f"({estimate_line(e)}; hw/calib/estimate.py: leave-one-out error of the time model, median / p90, "
              f"{loo_text()})")
    return 0


def list_grids(args) -> int:
    """``--grids``: every grid ``--grid`` takes, its role, what it is for, its page and its shape (``grid_rows``)."""
    rows = grid_rows()
    if args.json:
        print_json({"default": "default", "recommended": "wide", "grids": rows})
        return 0
    width = max(len(r["role"]) for r in rows)
    for r in rows:
        print(f"{r['grid']:<8} {r['role']:<{width}}  {r['what']} ({r['page']})")
        print(f"{'':<8} {'':<{width}}  {r['shape'][len(r['grid']) + 1:]}")
    return 0


def list_models(args) -> int:
    """``--models``: every model ``--model`` takes, its standing and its page (``MODEL_STANDING``)."""
    rows = model_standing()
    if args.json:
        print_json({"default": DEFAULT_MODEL, "recommended": RECOMMENDED_MODEL, "models": rows})
        return 0
    width = max(len(r["standing"]) for r in rows)
    print_table({r["model"]: f"{r['standing']:<{width}}  {r['what']} ({r['page']})" for r in rows})
    return 0


def runs_kept(err) -> int:
    """A sweep that stopped after keeping runs (``calibrate.RunsKept``; a failed fit after one run too): one stderr
    line naming where it stopped, the runs kept and the refit that fits them; status 130 (Ctrl-C), 143 (SIGTERM), 2
    (bad input), else 1."""
    from xstage.cli.exits import Terminated
    cause = err.__cause__
    if isinstance(cause, KeyboardInterrupt):
        word, status = ("terminated", 143) if isinstance(cause, Terminated) else ("interrupted", 130)
        print(f"xstage: {word} {err}", file=sys.stderr, flush=True)
        return status
    what = (str(cause).splitlines() or [""])[0]
    print(f"xstage: error: {type(cause).__name__}: {what} ({err.when}): {err.tail}", file=sys.stderr, flush=True)
    return 2 if isinstance(cause, InputError) else 1


def run(args) -> int:
    """Run the remote-store microbenchmark sweeps (zero-gap periodic bursts -> R, large-gap plateau -> T_iss0(K,B),
    isolated bursts -> Q(K)), fit the platform, check the Burst-Gap model against every point, and write
    platform.json plus the raw records (Parquet) into --out. Progress goes to stderr."""
    if args.grids:
        return list_grids(args)
    if args.models:
        return list_models(args)
    if args.estimate:
        return print_estimate(args)
    if args.own_rate and not args.against:
        raise InputError("--own-rate", True, "needs --against (the platform whose R it replaces)")
    if args.against and args.records is not None and not args.refit:
        from xstage.cli.calib_against import run_records
        return run_records(args)
    if args.out is None or not str(args.out).strip():
        raise InputError("--out", args.out, "is required (the output folder) unless --models, --grids or --estimate "
                         "is given")
    from xstage.hw.calib import calibrate

    if args.records is not None and not args.refit:
        raise InputError("--records", args.records, "needs --refit (it names the folder to refit) or --against (the "
                         "folder to score a platform on)")
    if args.median_with and not args.refit:
        raise InputError("--median-with", args.median_with[0], "needs --refit --records (it names another run to "
                         "take the median with; to measure several runs, use --repeat)")
    repeat = require_int("--repeat", args.repeat, minimum=1)
    if args.refit and repeat != 1:
        raise InputError("--repeat", args.repeat, "measures the grid again: it does not go with --refit (use "
                         "--median-with for runs already measured)")
    if args.against:   # every platform found before any GPU time is spent
        from xstage.cli.calib_against import _platform
        for name in args.against:
            _platform(name)
    if args.refit:
        if args.records is not None and not str(args.records).strip():
            raise InputError("--records", args.records, "must name a calibration folder")
        summary = calibrate.refit(args.out, name=args.name or None, overwrite=args.overwrite,
                                  split_args=split_args(args), model=model_arg(args), records=args.records,
                                  pool=args.pool or (), median_with=args.median_with or (),
                                  issue_law=args.issue_law or (), per_k_capacity=args.per_k_capacity)
    else:
        if args.target is None:
            raise InputError("--target", None, "is required (host, local or peer) unless --refit is given")
        cfg = build_config(args)
        calibrate.check_out_dir(args.out, overwrite=args.overwrite)   # before the runner and the sweep
        calibrate.check_pool(args.pool or (), args.target)            # the GPU: once the runner is open
        calibrate.check_combo(cfg.model, args.issue_law, args.per_k_capacity)
        calibrate.check_pool(args.issue_law or (), args.target, field="--issue-law")
        if args.sim:
            from xstage.sim.calib_runner import SimRunner
            from xstage.sim.platform import load_platform
            runner = SimRunner(load_platform(args.sim))
        else:
            from xstage.hw.common.targets import apply_launch_env, check_target
            apply_launch_env()
            if args.backend != "torch":   # checked by build_config; nvshmem4py must also import
                from xstage.hw.common.nvshmem import core
                core()
            if args.issue != "store":
                from xstage.hw.microbench.puts import device_bindings
                device_bindings(args.issue)   # one line before any allocation when the Numba bindings are missing
            check_target(args.target, self_peer=args.self_peer)
            from xstage.hw.calib.runners import GpuRunner
            ring = parse_size(args.ring, "--ring")
            runner = GpuRunner(args.target, buffer_bytes(cfg, ring), self_peer=args.self_peer,
                               timeout_ms=args.timeout_ms, ring_bytes=ring, peer_pattern=cfg.peer_pattern,
                               backend=args.backend, issue=args.issue)
        rank = int(os.environ.get("RANK", "0"))
        if not args.sim and rank == 0:       # every check passed and the GPU is open: what the sweep will take
            say(args, f"[calibrate] {estimate_line(sweep_estimate(cfg))}")
        try:
            if rank != 0:  # other ranks drive their own peer stores (the same sweeps); rank 0 records
                calibrate.sweeps(cfg, runner, progress=False)
                return 0
            summary = calibrate.run_calibration(cfg, runner, args.out, overwrite=args.overwrite,
                                                progress=progress_enabled(args), pool=args.pool or (),
                                                issue_law=args.issue_law or (),
                                                per_k_capacity=args.per_k_capacity)
        except calibrate.RunsKept as err:
            return runs_kept(err)
        finally:
            runner.close()
        say(args, f"[calibrate] wrote {args.out}/platform.json and records")
    for warning in summary.get("warnings") or ([summary["warning"]] if summary.get("warning") else []):
        print(f"xstage: warning: {warning}", file=sys.stderr, flush=True)
    if args.against:
        from xstage.cli.calib_against import scores
        summary = {**summary, "against": scores(args.against, args.out, own_rate=args.own_rate)}
    if args.json:
        print_json(summary)
    else:
        print_summary(summary)
        if args.against:
            from xstage.cli.calib_against import lines
            print()
            print("\n".join(lines(summary["against"])))
    return 0
