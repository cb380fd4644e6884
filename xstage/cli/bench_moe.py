"""``python -m xstage.hw.moe.bench``: the fused MoE FFN measured on one GPU (§5.2), W ranks emulated.

    python3 -m xstage.hw.moe.bench --out $OUT/moe                                 # benchmarks/gpu/moe.sh
    TRITON_INTERPRET=1 python -m xstage.hw.moe.bench --dry-run --out /tmp/moe      # CPU dry run, tiny shapes

Flags are checked (and the output folder) before any GPU work; the run (``xstage.hw.moe.bench.run``)
writes the records; this prints the per-configuration table and the summary (``xstage.compare.moe_records``,
which replays the simulator on the measured medians). Exit status 1 if a check failed, 2 on bad input.
"""

import json
import sys

from xstage.cli.bench_args import Entry, add_sweep_flags, check_sweep_flags, out_folder

NAME = "moe_bench"
TABLE_COLUMNS = ("config", "expert_wave(us)", "interleaved(us)", "speedup_interleaved", "expert_wave_local(us)",
                 "interleaved_local(us)", "grouped_mm(us)", "gemm_vs_grouped_mm", "baseline_total(us)", "sim_speedup")

RUN_HELP = "the §5.2 sweep on a GPU (records under --out)"  # as `xstage moe run`
RUN_DESCRIPTION = ("Correctness checks, then expert-wave / interleaved / local / grouped-GEMM baseline / Combine "
                   "copy timing per configuration; kernel and tile records.")


def add_flags(ap) -> None:
    """The sweep's flags, declared once: ``python -m xstage.hw.moe.bench`` and ``xstage moe run``."""
    ap.add_argument("--out", required=True, help="output folder for the records")
    add_sweep_flags(ap, budget_s=200.0)
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--no-checks", action="store_true")
    ap.add_argument("--precision", choices=("bf16", "w8a8"), default=None,
                    help="only the checks and configurations of this precision (w8a8 skips the bf16 tuning)")
    ap.add_argument("--short-k-kernel", default=None, metavar="JSON_FILE",
                    help="kernel options that update bench.BF16_SHORT_K's for this run (e.g. a tuner's pick)")
    ap.add_argument("--long-k-kernel", default=None, metavar="JSON_FILE",
                    help="kernel options that update bench.BF16_FAST for this run's long-K bf16 configurations")
    ap.add_argument("--sweep", choices=("main", "heldout", "heldout2", "heldout3"), default="main",
                    help="main: the committed sweep; heldout: configurations it never measured (setting L bf16, "
                         "setting M W8A8); heldout2 / heldout3: new bf16 shapes (hw/moe/sweep_heldout2.py, sweep_heldout3.py)")
    ap.add_argument("--models", default=None, metavar="NAMES",
                    help="only these sweep models (comma-separated, e.g. DiT-MoE-S,DiT-MoE-M); the checks still run")
    ap.add_argument("--quack", action="store_true",
                    help="also time quack's grouped GEMM (quack-kernels, untuned) beside torch._grouped_mm (bf16)")
    ap.add_argument("--overwrite", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes (with TRITON_INTERPRET=1 on a CPU)")


def check(args):
    """Every flag's value and the output folder, before any GPU work; bad input → ``InputError``."""
    check_sweep_flags(args)
    if getattr(args, "models", None) is not None:
        from xstage.errors import InputError
        from xstage.hw.moe.bench import DRY_SWEEP, SWEEPS

        known = {c[0] for c in (DRY_SWEEP if args.dry_run else SWEEPS[getattr(args, "sweep", "main")])}
        if not args.models.strip(",") or {m for m in args.models.split(",") if m} - known:
            raise InputError("--models", args.models, f"must name sweep models, from {sorted(known)}")
    for flag in ("short_k_kernel", "long_k_kernel"):
        if getattr(args, flag) is not None:
            kernel_options(getattr(args, flag), "--" + flag.replace("_", "-"))
    out_folder(args.out, overwrite=args.overwrite, holds=("moe-kernel.parquet",))
    return args


KERNEL_KEYS = {"place": bool, "early_rows": bool, "prefetch": bool, "num_stages": int, "maxnreg": int,
               "group_rows": int, "flat": bool, "block_k": int, "gluon": bool,
               "balance": bool}   # gluon_*: hw/moe/gluon_args.py


def kernel_options(path: str, flag: str = "--short-k-kernel") -> dict:
    """A ``--short-k-kernel`` / ``--long-k-kernel`` file: a JSON object of ``KERNEL_KEYS``; else ``InputError``."""
    from pathlib import Path

    from xstage.errors import InputError

    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise InputError(flag, path, f"must be a readable JSON file ({type(err).__name__})") from None
    if not isinstance(d, dict):
        raise InputError(flag, path, "must hold a JSON object")
    from xstage.hw.moe.gluon_args import check_run_keys

    check_run_keys(d, flag)
    for k, v in d.items():
        if k.startswith("gluon_"):
            continue
        if k not in KERNEL_KEYS or type(v) is not KERNEL_KEYS[k] or (type(v) is int and v < 1):
            raise InputError(f"{flag} {k}", v, f"must be one of {sorted(KERNEL_KEYS)} with its type (ints >= 1)")
    return d


def summary_table(rows: list, columns=TABLE_COLUMNS) -> str:
    """The per-configuration table of kernel rows (``compare.moe_records.per_config``)."""
    import pandas as pd

    from xstage.compare.moe_records import per_config

    table = per_config(pd.DataFrame(rows))
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        return table[[c for c in columns if c in table]].round(3).to_string(index=False)


def execute(args) -> int:
    """Run the checked sweep and print its table and summary; exit status 1 if a check failed."""
    from xstage.compare.moe_records import summarize
    from xstage.hw.moe import bench

    result = bench.run(args)
    if result["rows"]:
        print(summary_table(result["rows"]))
        print(json.dumps(summarize(args.out), indent=1, default=str))
    return 1 if result["failed"] else 0


ENTRY = Entry(NAME, "python -m xstage.hw.moe.bench", __doc__, add_flags, check, execute,
              run_help=RUN_HELP, run_description=RUN_DESCRIPTION)
parser, parse_args, main = ENTRY.parser, ENTRY.parse_args, ENTRY.main


if __name__ == "__main__":
    sys.exit(main())
