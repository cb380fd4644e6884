"""A tenth FA rule for the project's Triton kernels: the ninth, with the split kernel's drift read by K/V bytes per head.

Why (``docs/calibration.md``, the tenth-rule subsection): the ninth rule reads ``fused_wb_split``'s per-M fitted
drift linearly in log M between fitted M, and the drift is not smooth: it sits at 0.017-0.028 of a Q-loop per wave
up to 52K and jumps to 0.06-0.07 from 56K (fitted on the timed residuals of every committed run, 6c1c349-heldout2
included), so the interpolation at 52K (0.046) over-hid. What changes between 52K and 56K is one head's K/V
(2 x M x d x 2 bytes: 27.3 MB at 52K, 29.4 MB at 56K) against the L2 (a candidate; the committed tile logs show the
split kernel's programs stop closing up from 48K, 25 MB per head, on). The tenth rule therefore:

    fused_wb_split     the eighth rule's model, its programs at the drift fitted per M on ALL committed timed runs
                       (``FIT_RUNS``; tail-0 M left out, where nothing is split), keyed by one head's K/V bytes and
                       read at the NEAREST fitted point (``sim.predict_drift.drift_nearest``; a tie to the smaller):
                       a step between fitted points, never an interpolation across the jump
    no tail            as the ninth rule (every kernel its non-split build), and every variant's residual shifted by
                       -f x FA-only, f the no-store control's (``fused_hbm``) paired residual over FA-only at the
                       committed tail-0 M (44K: -38 / 5815 us = -0.65 %): the non-split fused build runs that much
                       faster than FA-only's non-split build, so a fully hidden variant measures negative. The
                       measured figures stay as measured (paired against FA-only as launched); only the answer moves.
    other rows         the ninth rule's answers, unchanged

    python benchmarks/predict_fa_rule10.py --fit
    python benchmarks/predict_fa_rule10.py --preregister 47104,... --out data/predictions/fa-rule10-preregistered-...json
    python benchmarks/predict_fa_rule10.py --runs attention-runs/<new> --preregistered predictions/<pre>.json --out ...
"""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import predict_fa_congestion as C  # noqa: E402
import predict_fa_rule8 as R8  # noqa: E402
import predict_fa_rule9 as R9  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import atomic_write_text, load_records  # noqa: E402
from xstage.sim.predict import FaKernel  # noqa: E402
from xstage.sim.predict_congestion import predict_congested  # noqa: E402
from xstage.sim.predict_drift import drift_nearest, fitted_per_m, kv_head_bytes  # noqa: E402

PP = C.PP
FIT_RUNS = R9.FIT_RUNS + ("attention-runs/6c1c349-heldout2",)
KEYS = ("rule10",) + R9.KEYS


def kv_bytes(r: dict) -> int:
    return kv_head_bytes(int(r["kw"]["seq_len"]), int(r["kw"]["head_dim"]))


def measure(base: Path, platform, m: dict, m8: dict, factors: dict) -> dict:
    """The tenth rule's inputs (module docstring): the split kernel's drift per K/V-bytes point, the tail-0 offset."""
    programs = int(platform.sm_count)
    rows = [r for r in R8.committed_rows(base, factors, FIT_RUNS)
            if r["variant"] == R9.SPLIT and not R9.no_tail(r["kw"], programs)]
    by_m = {}
    for r in rows:
        by_m.setdefault(r["M"], []).append(r)
    cache = {}

    def residual(M, d):
        return [cache.setdefault((id(r), d), R9.split_residual(r, m8, platform, m["q_c_bytes"], d)) for r in by_m[M]]

    per_m = fitted_per_m(residual, {M: [r["measured_E_res_us"] for r in g] for M, g in by_m.items()}, R9.GRID)
    per_bytes = {kv_bytes(by_m[M][0]): d for M, d in per_m.items()}
    ratios = {}
    for n in FIT_RUNS:
        k = load_records(base / n / "attention-kernel.parquet", "kernel")[0].drop_duplicates(["M", "variant"], keep="last")
        k = k.set_index(["variant", "M"])
        for M in k.loc["fa"].index:
            kw = {"heads": int(k.loc[("fa", M), "heads"]), "seq_len": int(M), "block_m": int(k.loc[("fa", M), "block_m"])}
            if ("fused_hbm", M) in k.index and R9.no_tail(kw, programs):
                ratios[f"{n}:{int(M)}"] = float(k.loc[("fused_hbm", M), "paired_minus_fa(us)"] / k.loc[("fa", M), "time(us)"])
    if not ratios:
        raise InputError("FIT_RUNS", FIT_RUNS, "hold no tail-0 M with a fused_hbm row")
    return {"split_drift_per_M": per_m, "split_drift_per_kv_bytes": per_bytes,
            "no_tail_offset_ratio": float(np.median(list(ratios.values()))), "no_tail_offset_from": ratios,
            "fit_runs": list(FIT_RUNS), "programs": programs}


def rule10(r: dict, platform, q_c: float, m8: dict, m10: dict) -> tuple:
    """(E_res_us, drift) of row ``r`` under the tenth rule (module docstring)."""
    drift = drift_nearest(m10["split_drift_per_kv_bytes"], kv_bytes(r))
    kw = R9.rule9_kw(r, m8, drift, m10["programs"])
    e = float(predict_congested(FaKernel(**kw), platform, q_c)["E_res_us"])
    if R9.no_tail(kw, m10["programs"]):
        e += m10["no_tail_offset_ratio"] * float(kw["fa_us"])   # the ratio is negative: the build runs faster
    return e, float(kw["program_spread"])


def predict(r: dict, platform, law: dict, m: dict, m8: dict, m9: dict, m10: dict, d7: float, tlaw: dict) -> None:
    R9.predict(r, platform, law, m, m8, m9, d7, tlaw)
    e, drift = rule10(r, platform, m["q_c_bytes"], m8, m10)
    r["rule10_E_res_us"], r["rule10_drift"], r["kv_head_bytes"] = e, drift, kv_bytes(r)
    if "measured_E_res_us" in r:
        r["rule10_within"] = bool(PP.within(e, r["measured_E_res_us"]))


def judge_preregistered(table: list, path: Path) -> None:
    """Each measured row's pre-registered answers beside (``prereg_<rule>_E_res_us`` / ``_within``)."""
    C.judge_preregistered(table, path, KEYS)


def summary(table: list) -> dict:
    out = C.rule_summary(table, KEYS, R9.by_variant_m_set)
    judged = [r for r in table if "measured_E_res_us" in r]
    pre = [r for r in judged if all(f"prereg_{k}_within" in r for k in KEYS)]
    if pre and len(pre) < len(judged):   # a run with rows never pre-registered (another head count): the subset
        out["pre-registered rows"] = C.rule_counts({"x": pre}, KEYS + tuple(f"prereg_{k}" for k in KEYS))["x"]
    return out


def main(argv=None) -> int:
    ap = C.rule_parser(__doc__, "the committed Triton rows the rule was fitted on",
                       "comma-separated Triton runs under data/ to judge",
                       preregistered_help="with --runs: a pre-registration record under data/")
    args = ap.parse_args(argv)
    platform, base, m = C.rule_inputs(args)
    law, tlaw, factors, d7, m8 = R8.triton_inputs(base)
    m9 = R9.measure(base, platform, m, m8, factors)
    m10 = measure(base, platform, m, m8, factors)
    if args.fit:
        table = R8.committed_rows(base, factors, FIT_RUNS)
    elif args.preregister:
        table = R8.preregistered(R8.preregistered_ms(args.preregister), base, factors)
    else:
        table = C.judged_rows(base, args.runs, lambda folder, name: C.triton_rows(folder, name, factors))
    for r in table:
        predict(r, platform, law, m, m8, m9, m10, d7, tlaw)
    if args.preregistered and table:
        judge_preregistered(table, base / args.preregistered)
    print("split drift per K/V MB per head: " + " ".join(f"{b / 1e6:.1f} {d:.3f}" for b, d in
                                                         sorted(m10["split_drift_per_kv_bytes"].items()))
          + f"; tail-0 offset {m10['no_tail_offset_ratio']:+.4f} x FA-only")
    for r in table:
        meas = r.get("measured_E_res_us")
        print(f"{r['set']:>30} {r['M']:>6} {r['variant']:>23} meas {'-' if meas is None else f'{meas:.0f}':>5} "
              + " ".join(f"{k[:7]} {r[k + '_E_res_us']:5.0f}" for k in KEYS[:3])
              + ("" if meas is None else "  " + " ".join(f"{k[:7]}:{'y' if r[k + '_within'] else 'n'}" for k in KEYS[:3])))
    summ = summary(table)
    for name, d in summ.items():
        print(f"{name:>30}: " + "  ".join(f"{k} {v['within']}/{v['n']} ({v['median_abs_error_us']:.0f})" for k, v in d.items()))
    if args.out:
        record = {"what": "FA residual exposure of the Triton kernels: the tenth rule (the ninth, fused_wb_split's fitted "
                          "drift read at the nearest K/V-bytes-per-head point, a tail-0 build offset) beside rules 9-5",
                  "platform": args.platform, "tolerance": PP.TOLERANCE, "rules_commit": C._commit(),
                  "tenth_rule": {**m10, "split_drift_per_kv_bytes": {str(k): v for k, v in
                                                                      m10["split_drift_per_kv_bytes"].items()}},
                  "ninth_rule": m9, "eighth_rule": m8,
                  "mode": "fit" if args.fit else "preregistered" if args.preregister else "judged",
                  "fa_us_interpolated_from": list(R8.RUNS) if args.preregister else None,
                  "summary": summ, "rows": table, "provenance": provenance()}
        atomic_write_text(args.out, json.dumps(record, indent=1, default=str))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    exit_with(main, "predict_fa_rule10.py")
