"""A seventh FA rule: every FA4 kernel under the sixth rule's global stall, its fused programs drifting at one d7.

What the committed rows say (``data/attention-fa4/run1``, ``rep``, ``pers4``-``pers9``; no tile log): stock FA4
with direct stores and the persistent ``drain`` kernel (FA4's SM90 mainloop, a TMA store at each tile's end) pay
the same residual at every M where both were measured, in the Ulysses layout (24K: 245 / 258 us; 32K: 346-359 /
340-341; 48K: 402 / 397; 64K: 415-480 / 357-405), so one model has to serve both. Per wave (residual less the
last wave's drain, over the full waves) the all-host rows (every tile remote, 132 x 32 KiB = 4.3 MB a wave)
expose 74, 72, 61, 69, 61, 52 us at 8K, 16K, 24K, 32K, 48K, 64K, where a lockstep wave drained down to the sixth
rule's q_c costs (4.3 - 0.35) MB / 52.5 GB/s = 76 us; the Ulysses rows (7/8 of the bytes; the own chunk's tiles
sit in 1-2 waves per head) 62, 62, 53, 58, 40, 36 us. So the all-host over-prediction of both rules from 24K up
is the same fall of the per-wave cost with M as the Ulysses rows', not a matter of bytes or destinations (per-
wave ratio Ulysses / all-host 0.84-0.87 up to 32K, the bytes' 0.875). A per-wave cost that falls with the Q-loop
at a fixed burst is what the sixth rule's stall gives when the programs' tile ends spread: the spread of a
drifting wave is waves x drift x Q-loop (64K's 790 us Q-loop spreads it 6x wider than 8K's 127 us), and a wave
whose tile ends spread over a good part of its 82 us drain never backs up far above q_c. The sixth rule gave
``drain`` the instrumented tile log's fused drift (0.0116: too strong at 48K-64K, 285 / 195-207 against 397 /
357-405; those logged 64K launches themselves paid only ~211 us, so they drifted more than the timed kernel) and
stock FA4 none (too little: 573 / 762 against 402 / 415-480); it lost the staggered kernels' 32K rows because at
s5 their sends spread too far (30 against 47-52).

Seventh rule (fixed here, before the run that judges it; ``--preregister``):

    model      the sixth rule (``sim.predict_congestion``: no per-SM wait for its own store; every SM stalls while
               the link's FIFO backlog exceeds q_c = 0.35 MB, q_c from the pers7 tile log as recorded) for EVERY
               FA4 kernel: stock FA4 direct stores (``fused_allhost``, ``fused_vmm``, ``fused_perchunk``), ``drain``
               and every ``stagger*`` kernel, structure as the fifth rule (``split_structure``)
    drift      the fused programs of every one of them drift at ONE d7; FA-only twins as the sixth rule (persistent
               s5 = 0.0165, the pers7 FA-only tile log's; stock 0)
    d7         the one new number: the grid value (0 to 0.0165 by 0.0005) that puts the most committed FA4 rows
               within max(20 us, 20 %), ties to the least median |error| (``fit_d7`` over ``fit_rows``: every
               stock and persistent row of the runs above, 130 rows). An effective spread of the timed kernels' tile
               ends, fitted on residuals; no timer measured it (stock FA4 has none, and the instrumented launches
               drift more)

Not in it: the Triton kernel (the fifth rule as recorded); the dynamic schedulers (``*dyn``) keep the static deal.

    python benchmarks/predict_fa_rule7.py --fit --out data/predictions/fa-rule7-fit-h200-pcie-host.json
    python benchmarks/predict_fa_rule7.py --preregister 20480,40960,57344 --out data/predictions/...json
    python benchmarks/predict_fa_rule7.py --runs attention-fa4/<new run> --out data/predictions/...json
    python benchmarks/predict_fa_rule7.py --platform data/calibration-extra/h100-pcie-host-v1/platform.json --d7 0.006 \
        --runs attention-fa4/<an H100 run> --out ...   # another GPU: d7 as fitted on the H200, not refitted
"""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import predict_fa_congestion as C  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import atomic_write_text, load_records  # noqa: E402
from xstage.sim.predict import FaKernel  # noqa: E402
from xstage.sim.predict_congestion import predict_congested  # noqa: E402

PP = C.PP
FIT_RUNS = C.STOCK_RUNS + C.PERS_RUNS + ("attention-fa4/pers9",)
FA_FROM = ("attention-fa4/pers8", "attention-fa4/pers9")
D7_GRID = tuple(round(0.0005 * i, 4) for i in range(34))
KEYS = ("rule7", "rule6_congestion", "rule5")


def rule7_us(r: dict, platform, m: dict, d7: float) -> float:
    """The seventh rule's residual of row ``r`` (module docstring)."""
    fa_spread = m["s5"] if r["kind"] == "persistent" else 0.0
    k = FaKernel(**dict(r["kw"], program_spread=d7, fa_program_spread=fa_spread))
    return float(predict_congested(k, platform, m["q_c_bytes"])["E_res_us"])


def run_rows(base: Path, name: str) -> list:
    """An FA4 run's rows: stock direct stores (``fused_vmm`` as ``pers_rows`` gives it) and persistent kernels."""
    rows = [r for r in C.stock_rows(base / name, name) if r["variant"] != "fused_vmm"]
    return rows + C.pers_rows(base / name, name, [])


def fit_rows(base: Path) -> list:
    """Every committed FA4 row d7 is fitted on: the runs of FIT_RUNS."""
    return [r for name in FIT_RUNS for r in run_rows(base, name)]


def fit_d7(rows: list, platform, m: dict) -> dict:
    """d7: the grid value with the most rows within target, ties to the least median |error| (module docstring)."""
    score = {}
    for d in D7_GRID:
        pred = [rule7_us(r, platform, m, d) for r in rows]
        within = sum(PP.within(p, r["measured_E_res_us"]) for p, r in zip(pred, rows))
        err = float(np.median([abs(p - r["measured_E_res_us"]) for p, r in zip(pred, rows)]))
        score[d] = (int(within), err)
    best = min(D7_GRID, key=lambda d: (-score[d][0], score[d][1]))
    return {"d7": best, "rows": len(rows), "runs": list(FIT_RUNS),
            "grid": {str(d): {"within": w, "median_abs_error_us": e} for d, (w, e) in score.items()}}


def predict(r: dict, platform, law: dict, m: dict, d7: float) -> None:
    C.predict(r, platform, law, m)
    r["rule7_E_res_us"] = rule7_us(r, platform, m, d7)
    if "measured_E_res_us" in r:
        r["rule7_within"] = bool(PP.within(r["rule7_E_res_us"], r["measured_E_res_us"]))


def preregistered(Ms: list, base: Path, runs=FA_FROM, kernels=C.PREREG_KERNELS) -> list:
    """Rows without a measurement at ``Ms``, FA-only times interpolated log-log in M between the two nearest M
    measured in ``runs`` together (a later run's row replaces an earlier one's at the same M)."""
    frames = [load_records(base / n / "attention-fa4-kernel.parquet", "kernel")[0] for n in runs]
    import pandas as pd
    frame = pd.concat(frames, ignore_index=True)
    g = frame.drop_duplicates(["M", "variant"], keep="last").set_index(["variant", "M"])["time(us)"]
    b = frame.iloc[0]
    out = []
    for M in Ms:
        common = dict(seq_len=int(M), heads=int(b["heads"]), head_dim=int(b["head_dim"]),
                      world_size=int(b["world_size"]), rank=int(b["rank"]))
        vmm = (M * int(b["heads"]) * int(b["head_dim"]) * 2) % (2 << 20) == 0   # the bench's VMM granularity
        cases = [("fa4", "fa4", v) for v in ("fused_allhost", "fused_perchunk") + (("fused_vmm",) if vmm else ())]
        if vmm:
            cases += [("pfa4" if k == "drain" else f"pfa4_{k}", k,
                       "fused_vmm_pers" + ("" if k == "drain" else f"_{k}")) for k in kernels]
        for fa, kern, fused in cases:
            fa_us = C.loglog_us(g, fa, M)
            stock = kern == "fa4"
            kw = dict(common, fa_us=fa_us, **({"remote_fraction": 1.0 if fused == "fused_allhost" else None}
                                              if stock else PP.split_structure(kern)))
            out.append({"set": "preregistered", "kind": "stock" if stock else "persistent", "kernel": kern,
                        "M": int(M), "variant": fused, "fa_variant": fa, "fa_us_interpolated": fa_us, "kw": kw})
    return out


def summary(table: list) -> dict:
    groups = {}
    for r in table:
        if "measured_E_res_us" not in r:
            continue
        for name in (r["kind"], f"{r['kind']} {r['kernel'] if r['kind'] == 'persistent' else r['variant']}",
                     f"M {r['M']}", "all"):
            groups.setdefault(name, []).append(r)
    return C.rule_counts(groups, KEYS)


def main(argv=None) -> int:
    ap = C.rule_parser(__doc__, "the rows d7 is fitted on, with every rule",
                       "comma-separated FA4 runs under data/ to judge")
    ap.add_argument("--d7", type=float, default=None,
                    help="use this d7 instead of fitting it on the committed H200 rows with --platform (another GPU's "
                         "platform: the d7 fitted on the H200, 0.006, as recorded)")
    args = ap.parse_args(argv)
    if args.d7 is not None and round(args.d7, 4) not in D7_GRID:   # the fit's grid, whose scores the record keeps
        raise InputError("--d7", args.d7, f"must be a value of the fit's grid, 0 to {D7_GRID[-1]} by 0.0005")
    if args.d7 is not None:
        args.d7 = round(args.d7, 4)
    platform, base, m = C.rule_inputs(args)
    law = json.loads((base / PP.LAWS).read_text())["laws"]["fa4"]
    fit = fit_d7(fit_rows(base), platform, m)
    if args.d7 is not None:
        fit = {**fit, "d7_fitted_with_this_platform": fit["d7"], "d7": args.d7, "d7_given": True}
    if args.fit:
        table = fit_rows(base)
    elif args.preregister:
        try:
            Ms = [int(x) for x in args.preregister.split(",") if x.strip()]
        except ValueError:
            raise InputError("--preregister", args.preregister, "must be comma-separated integers") from None
        table = preregistered(Ms, base)
    else:
        table = []
        for name in (x.strip() for x in args.runs.split(",") if x.strip()):
            if not (base / name / "attention-fa4-kernel.parquet").is_file():
                raise InputError("--runs", name, "has no attention-fa4-kernel.parquet")
            table += run_rows(base, name)
    for r in table:
        predict(r, platform, law, m, fit["d7"])
    given = fit.get("d7_given")
    print(f"d7 = {fit['d7']}{' (given)' if given else ''} ({fit['grid'][str(fit['d7'])]['within']}/{fit['rows']} fit rows "
          "within target); "
          f"q_c = {m['q_c_MB']} MB, s5 = {m['s5']:.4f}")
    for r in table:
        meas = r.get("measured_E_res_us")
        print(f"{r['set']:>22} {r['M']:>6} {r['variant']:>28} meas {'-' if meas is None else f'{meas:.0f}':>5} "
              + " ".join(f"{k[:5]} {r[k + '_E_res_us']:5.0f}" for k in KEYS)
              + ("" if meas is None else "  " + " ".join(f"{k[:5]}:{'y' if r[k + '_within'] else 'n'}" for k in KEYS)))
    summ = summary(table)
    for name, d in summ.items():
        print(f"{name:>30}: " + "  ".join(f"{k} {v['within']}/{v['n']} ({v['median_abs_error_us']:.0f})" for k, v in d.items()))
    if args.out:
        record = {"what": "FA residual exposure: the seventh rule (every FA4 kernel under the sixth rule's stall, its "
                          "fused programs drifting at one fitted d7) beside the fifth and sixth", "platform": platform.name,
                  "platform_file": args.platform, "tolerance": PP.TOLERANCE,
                  "rules_commit": C._commit(), "fa4_law": law, "sixth_rule": m, "seventh_rule": fit,
                  "mode": "fit" if args.fit else "preregistered" if args.preregister else "judged",
                  "fa_us_interpolated_from": list(FA_FROM) if args.preregister else None,
                  "summary": summ, "rows": table, "provenance": provenance()}
        atomic_write_text(args.out, json.dumps(record, indent=1, default=str))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    exit_with(main, "predict_fa_rule7.py")
