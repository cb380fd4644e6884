"""Does an FA4 sweep's measured residual reproduce? The rows the seventh FA rule scores, one run against another.

Pre-registered in ``data/attention-extra/call23b-preregistration.md`` (session 23) for the H100's 64K residuals: for
each row the seventh rule scores (``predict_fa_rule7.run_rows``: stock ``fused_allhost``, ``fused_perchunk``,
``fused_vmm`` against ``fa4``; persistent ``drain`` and ``stagger`` against their FA-only twins; the paired residual
``paired_minus_fa(us)`` as the rule reads it), each later run's residual against the reference run's at the same
(variant, M), within max(20 us, 20 %) of the reference's. Beside it, judging nothing: the unpaired estimate (median
fused time minus median FA-only time) of every run, which the paired one should match where clocks hold still.

    python benchmarks/fa4_repeat23.py --reference attention-fa4/h100-pers12 \
        --runs attention-fa4/h100-pers12-a,attention-fa4/h100-pers12-b --M 65536 \
        --json data/predictions/fa4-repeat23-h100.json
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import predict_fa_rule7 as R7  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.paths import data_dir  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import atomic_write_text, load_records  # noqa: E402

TOLERANCE = {"abs_us": 20.0, "rel": 0.20}


def within(value: float, reference: float) -> bool:
    return abs(value - reference) <= max(TOLERANCE["abs_us"], TOLERANCE["rel"] * abs(reference))


def unpaired_us(folder: Path) -> dict:
    """{(variant, M): median fused time - median FA-only time} for the rows the rule scores (FA-only: ``fa4`` for
    stock rows, ``pfa4`` / ``pfa4_<kernel>`` for persistent ones)."""
    frame, _ = load_records(folder / "attention-fa4-kernel.parquet", "kernel")
    out = {}
    for M, g in frame.groupby("M"):
        t = g.drop_duplicates("variant", keep="last").set_index("variant")["time(us)"]
        for v in t.index:
            if not v.startswith("fused_"):
                continue
            fa = "fa4" if not v.startswith("fused_vmm_pers") else "pfa4" + v[len("fused_vmm_pers"):]
            if fa in t.index:
                out[(v, int(M))] = float(t[v] - t[fa])
    return out


def residuals(base: Path, name: str) -> dict:
    """{(variant, M): paired residual} of the rows the seventh rule scores in run ``name``."""
    if not (base / name / "attention-fa4-kernel.parquet").is_file():
        raise InputError("--runs", name, "has no attention-fa4-kernel.parquet")
    return {(r["variant"], int(r["M"])): float(r["measured_E_res_us"]) for r in R7.run_rows(base, name)}


def compare(base: Path, reference: str, runs: list, Ms: list | None) -> dict:
    ref = residuals(base, reference)
    keys = sorted(k for k in ref if Ms is None or k[1] in Ms)
    if not keys:
        raise InputError("--M", Ms, f"matches no row of {reference}")
    table, counts = [], {}
    for name in runs:
        got = residuals(base, name)
        n_in = n = 0
        for k in keys:
            if k not in got:
                continue
            ok = within(got[k], ref[k])
            n, n_in = n + 1, n_in + ok
            table.append({"run": name, "variant": k[0], "M": k[1], "reference_us": ref[k], "residual_us": got[k],
                          "difference_us": got[k] - ref[k], "within": ok})
        counts[name] = {"within": n_in, "n": n}
    unpaired = {name: {f"{v} {M}": u for (v, M), u in unpaired_us(base / name).items() if (v, M) in keys}
                for name in [reference, *runs]}
    return {"rows": table, "counts": counts, "unpaired_us": unpaired,
            "median_abs_difference_us": float(np.median([abs(r["difference_us"]) for r in table])) if table else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", required=True, help="the run the others are held against (a folder under data/)")
    ap.add_argument("--runs", required=True, help="comma-separated runs under data/")
    ap.add_argument("--M", default=None, help="comma-separated M to compare (default: every M of the reference)")
    ap.add_argument("--json", default=None, help="write the record; never over an existing file")
    args = ap.parse_args(argv)
    if args.json and Path(args.json).exists():
        raise InputError("--json", args.json, "already exists (records are never overwritten)")
    try:
        Ms = [int(x) for x in args.M.split(",") if x.strip()] if args.M else None
    except ValueError:
        raise InputError("--M", args.M, "must be comma-separated integers") from None
    runs = [x.strip() for x in args.runs.split(",") if x.strip()]
    result = compare(data_dir(), args.reference, runs, Ms)
    for r in result["rows"]:
        print(f"{r['run']:>30} {r['M']:>6} {r['variant']:>24} ref {r['reference_us']:6.0f} got {r['residual_us']:6.0f} "
              f"({r['difference_us']:+5.0f}) {'in' if r['within'] else 'OUT'}")
    for name, c in result["counts"].items():
        print(f"{name}: {c['within']} of {c['n']} within max(20 us, 20 %) of {args.reference}")
    if args.json:
        atomic_write_text(args.json, json.dumps({"what": __doc__.splitlines()[0], "reference": args.reference,
                                                 "runs": runs, "M": Ms, "tolerance": TOLERANCE, **result,
                                                 "provenance": provenance()}, indent=1))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    exit_with(main, "fa4_repeat23.py")
