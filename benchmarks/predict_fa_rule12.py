"""A twelfth FA rule for the project's Triton kernels: the split kernel's drift set by the K/V steps per Q tile.

Why (``docs/calibration/attention-rule12.md``): the eleventh rule (one head's K/V bytes against the L2) was refuted
on ad8f0af-heldout4: at head dim 64 (half the bytes) ``fused_wb_split`` is hidden at the same M as d 128 (60-64K),
and the tile grid was ruled out before (6 heads at 26-30K stay exposed). Every committed split row ran block_n 128,
so what is consistent with every run is M / block_n, the number of K/V steps each Q tile's mainloop runs (its
length in steps, not in time: d 64 halves the time per step and still hides at the same M). The twelfth rule reads
only what a user has -- M, block_n, heads, head dim, the FA-only time -- and keys the eleventh rule's three regimes
by steps = M // block_n (``sim.predict_drift.steps_regime``):

    low    steps <= 384   (48K at block_n 128: the largest M where every committed d 128 split row is exposed)
    band   384 < steps < 480
    high   steps >= 480   (60K at block_n 128: from here every committed split row is hidden)
           each drift is ONE value fitted on every committed timed split row with a tail in that regime (least
           median |error|, grid 0-0.1 by 0.001), in the eighth rule's stall model: the eleventh rule's fit runs
           plus each repeat of ad8f0af-heldout4 as its own row (``FIT_RUNS``, ``REPEAT_RUNS``)
    other variants and tail 0   the tenth rule's answers, unchanged (as rule 11)

At block_n 128 the regimes are those of the eleventh rule's declared alternative ``rule11_m`` (M alone); the two
part only where block_n is not 128. Rules 11, ``rule11_m``, 10 and 9 are judged beside. A run with repeats is
judged per configuration on the median over repeats and on each repeat alone (``predict_fa_rule11.run_rows``).

    python benchmarks/predict_fa_rule12.py --fit --out data/predictions/fa-rule12-fit-h200-pcie-host.json
    python benchmarks/predict_fa_rule12.py --preregister 32768:3:128:64,30720:3:64:128 --out data/predictions/...
    python benchmarks/predict_fa_rule12.py --runs attention-runs/<new> --preregistered predictions/<pre>.json --out ..
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import predict_fa_congestion as C  # noqa: E402
import predict_fa_rule8 as R8  # noqa: E402
import predict_fa_rule9 as R9  # noqa: E402
import predict_fa_rule10 as R10  # noqa: E402
import predict_fa_rule11 as R11  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.predict import FaKernel  # noqa: E402
from xstage.sim.predict_congestion import predict_congested  # noqa: E402
from xstage.sim.predict_drift import L2_REGIMES, STEP_BOUNDS, fitted_per_m, steps_regime  # noqa: E402

PP = C.PP
FIT_RUNS = R11.FIT_RUNS
REPEAT_RUNS = ("attention-runs/ad8f0af-heldout4",)
KEYS = ("rule12",) + R11.KEYS


def regime(r: dict) -> str:
    return steps_regime(int(r["kw"]["seq_len"]), int(r["kw"]["block_n"]))


def fit_rows(base: Path, factors: dict) -> list:
    """Every committed timed Triton row the rule is fitted on: ``FIT_RUNS`` and each repeat of ``REPEAT_RUNS``."""
    rows = R8.committed_rows(base, factors, FIT_RUNS)
    for n in REPEAT_RUNS:
        rows += [r for r in R11.run_rows(base / n, n, factors) if "#rep" in r["set"]]
    return rows


def measure(base: Path, platform, m: dict, m8: dict, factors: dict) -> dict:
    """The twelfth rule's three regime drifts of ``fused_wb_split`` (module docstring)."""
    programs = int(platform.sm_count)
    rows = [r for r in fit_rows(base, factors) if r["variant"] == R9.SPLIT and not R9.no_tail(r["kw"], programs)]
    groups = {}
    for r in rows:
        groups.setdefault(L2_REGIMES.index(regime(r)), []).append(r)
    cache = {}

    def residual(i, d):
        return [cache.setdefault((id(r), d), R9.split_residual(r, m8, platform, m["q_c_bytes"], d)) for r in groups[i]]

    fit = fitted_per_m(residual, {i: [r["measured_E_res_us"] for r in g] for i, g in groups.items()}, R9.GRID)
    return {"bounds": {"low_max_steps": STEP_BOUNDS[0], "high_min_steps": STEP_BOUNDS[1]},
            "split_drift": {L2_REGIMES[i]: d for i, d in fit.items()},
            "split_rows": {L2_REGIMES[i]: len(g) for i, g in groups.items()},
            "block_n_of_fit_rows": sorted({int(r["kw"]["block_n"]) for r in rows}),
            "fit_runs": list(FIT_RUNS) + [f"{n} (each repeat)" for n in REPEAT_RUNS], "programs": programs}


def split_answer(r: dict, platform, q_c: float, m8: dict, m12: dict) -> tuple:
    """(residual, drift, regime) of the twelfth rule for a ``fused_wb_split`` row with a tail."""
    name = regime(r)
    kw = R9.rule9_kw(r, m8, m12["split_drift"][name], m12["programs"])
    return float(predict_congested(FaKernel(**kw), platform, q_c)["E_res_us"]), float(kw["program_spread"]), name


def predict(r: dict, platform, law, m, m8, m9, m10, m11, m12, d7, tlaw) -> None:
    R11.predict(r, platform, law, m, m8, m9, m10, m11, d7, tlaw)
    name = regime(r)
    if r["variant"] == R9.SPLIT and not R9.no_tail(r["kw"], m12["programs"]):
        e, drift, name = split_answer(r, platform, m["q_c_bytes"], m8, m12)
    else:
        e, drift = r["rule10_E_res_us"], r["rule10_drift"]
    r["rule12_E_res_us"], r["rule12_drift"], r["rule12_regime"] = e, drift, name
    r["steps"] = int(r["kw"]["seq_len"]) // int(r["kw"]["block_n"])
    if "measured_E_res_us" in r:
        r["rule12_within"] = bool(PP.within(e, r["measured_E_res_us"]))


def parse_points(text: str) -> list:
    """[(M, heads, head_dim, block_n)] of "M[:heads[:d[:block_n]]],..." (3 heads, d 128, block_n 128 left out)."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        parts = item.split(":")
        if len(parts) > 4 or not all(p.isdigit() for p in parts):
            raise InputError("--preregister", item, "must be M, M:heads, M:heads:head_dim or M:heads:head_dim:block_n")
        out.append(tuple(int(x) for x in (parts + ["3", "128", "128"][len(parts) - 1:])[:4]))
    return out


def preregistered(pts: list, base: Path, factors: dict) -> list:
    """The eleventh rule's pre-registration rows (FA-only estimated from the committed 3-head d 128 runs, scaled by
    heads / 3 and d / 128) at block_n of each point."""
    out = []
    for M, heads, d, bn in pts:
        if M % bn:
            raise InputError("--preregister", f"{M}:{heads}:{d}:{bn}", "M must be a multiple of block_n")
        for r in R11.preregistered([(M, heads, d)], base, factors):
            r["kw"] = dict(r["kw"], block_n=int(bn))
            out.append(r)
    return out


def summary(table: list) -> dict:
    return C.rule_summary(table, KEYS, _groups)


def _groups(r: dict) -> tuple:
    kind, bn = R11.row_kind(r), r["kw"]["block_n"]
    cfg = f"M {r['M']} H {r['kw']['heads']} d{r['kw']['head_dim']} bn{bn}"
    return (kind, f"{kind} variant {r['variant']}", f"{kind} {cfg}", f"{kind} regime {r['rule12_regime']}",
            f"{kind} bn{bn}", f"{kind} variant {r['variant']} bn{bn}")


ROW_KEYS = ("set", "kind", "kernel", "M", "variant", "rep", "steps", "measured_E_res_us", "spread", "fa_us_interpolated",
            "prereg_fa_us_interpolated")
SLIM_RULES = ("rule12", "rule11", "rule11_m", "rule10", "rule9")
KW_KEYS = ("seq_len", "heads", "head_dim", "block_m", "block_n", "fa_us", "send", "tail_parts")


def slim(r: dict) -> dict:
    """The record's copy of a row: its measurement, configuration and the answers of rules 9-12 (and their
    pre-registered answers; the drift of rule 12 only) only, floats rounded, so that the shipped records stay under their size bound."""
    keep = {k: r[k] for k in ROW_KEYS if k in r}
    keep["kw"] = {k: r["kw"][k] for k in KW_KEYS if k in r["kw"]}
    rules = tuple(f"{k}_" for k in SLIM_RULES) + tuple(f"prereg_{k}_" for k in SLIM_RULES)
    keep.update({k: v for k, v in r.items() if k.startswith(rules) and "_const_" not in k
                 and (k == "rule12_drift" or not k.endswith("_drift"))})
    return _rounded(keep)


def _rounded(x):
    """``x`` with every float rounded to 1e-4 (us, or a drift: far below any tolerance; flags computed before)."""
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rounded(v) for v in x]
    return round(x, 4) if isinstance(x, float) else x


def main(argv=None) -> int:
    ap = C.rule_parser(__doc__, "the committed Triton rows the rule was fitted on (repeats of heldout4 included)",
                       "comma-separated Triton runs under data/ to judge (repeats in a rep column)",
                       preregistered_help="with --runs: a pre-registration record under data/")
    args = ap.parse_args(argv)
    platform, base, m = C.rule_inputs(args)
    law, tlaw, factors, d7, m8 = R8.triton_inputs(base)
    m9 = R9.measure(base, platform, m, m8, factors)
    m10 = R10.measure(base, platform, m, m8, factors)
    m11 = R11.measure(base, platform, m, m8, factors)
    m12 = measure(base, platform, m, m8, factors)
    if args.fit:
        table = fit_rows(base, factors)
    elif args.preregister:
        table = preregistered(parse_points(args.preregister), base, factors)
    else:
        table = C.judged_rows(base, args.runs, lambda folder, name: R11.run_rows(folder, name, factors))
    for r in table:
        predict(r, platform, law, m, m8, m9, m10, m11, m12, d7, tlaw)
    if args.preregistered and table:
        C.judge_preregistered(table, base / args.preregistered, KEYS)
    print(f"split drift per steps regime: {m12['split_drift']} (rows {m12['split_rows']}, block_n "
          f"{m12['block_n_of_fit_rows']})")
    for r in table:
        meas = r.get("measured_E_res_us")
        print(f"{r['set']:>44} {r['M']:>6} H{r['kw']['heads']} d{r['kw']['head_dim']:<3} bn{r['kw']['block_n']:<3} "
              f"st{r['steps']:<4} {r['variant']:>23} {r['rule12_regime']:>4} meas {'-' if meas is None else f'{meas:.0f}':>5} "
              + " ".join(f"{k[:8]} {r[k + '_E_res_us']:5.0f}" for k in KEYS[:5])
              + ("" if meas is None else "  " + " ".join(f"{k[:8]}:{'y' if r[k + '_within'] else 'n'}" for k in KEYS[:5])))
    summ = summary(table)
    C.print_summary(summ, lambda k: k in KEYS[:5] or k.startswith("prereg_rule12"), 40)
    if args.out:
        record = {"what": "FA residual exposure of the Triton kernels: the twelfth rule (fused_wb_split's drift by the "
                          "K/V steps per Q tile, M // block_n, three regimes) beside rules 11-9",
                  "platform": args.platform, "tolerance": PP.TOLERANCE, "rules_commit": C._commit(),
                  "twelfth_rule": m12, "eleventh_rule": m11,
                  "mode": "fit" if args.fit else "preregistered" if args.preregister else "judged",
                  "summary": _rounded(summ), "rows": [slim(r) for r in table], "provenance": provenance()}
        C.write_record(args.out, record, separators=(",", ":"))
    return 0


if __name__ == "__main__":
    exit_with(main, "predict_fa_rule12.py")
