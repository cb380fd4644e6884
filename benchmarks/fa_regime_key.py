"""What keys the split tile-end Triton kernel's hiding: M (sequence length) or the kernel's length (FA-only time)?

Issue 15 item 5; ``docs/calibration/attention-mechanism.md`` ("What would decide it"). ``fused_wb_split`` (W = 8
emulated over PCIe to pinned host memory, one H200, block_m = block_n = 128) is exposed by ~150-350 us below M ~56K
and hidden (0-20 us) above, at 3 heads d 128 and at d 64. In every committed row M and the FA-only time grow
together, so two keys are equally consistent with the records:

    H_M  M sets the regime: exposed at M <= 49152 (every committed d 128 split row with a tail there is exposed),
         hidden at M >= 61440 (every committed split row with a tail there is hidden), whatever the heads
    H_T  the FA-only time sets it (e.g. the GPU's power cap engaging on long kernels): exposed at FA-only <= 7.0 ms
         (every committed row there is exposed), hidden at FA-only >= 10.0 ms (every committed row there is hidden)

The discriminating configurations (``DISCRIMINATING``) put M and the FA-only time on opposite sides: 1 head at
M >= 64K (FA-only ~4-5 ms: H_M hidden, H_T exposed) and 6 heads at M <= 46K (FA-only ~11-13 ms: H_M exposed, H_T
hidden); the controls (``CONTROLS``, 3 heads at 48K and 60K) sit on the same side under both. 3 interleaved repeats
(``attention_triton_sweep5.py``).

Decision rule (fixed in the pre-registration record, ``rule``; ``classify`` / ``verdict``): per configuration, s =
the median over repeats of ``fused_wb_split``'s paired residual and f = that of ``fused_wb`` (us). It is "hidden" if
s <= max(20, 0.1 f), else "exposed" if s >= 100, else "between". A discriminating configuration counts only with all
its repeats and its measured median FA-only time on its pre-registered side of H_T's bounds (1 head <= 7000 us,
6 heads >= 10000 us); otherwise it is "void". The controls are valid iff 3 heads 48K is exposed and 3 heads 60K
hidden. Then:

    H_M supported   controls valid, >= 3 of the 4 discriminating configurations as H_M predicts, none as H_T does
    H_T supported   controls valid, >= 3 of the 4 as H_T predicts, none as H_M does
    both refuted    controls valid, >= 2 of the 4 against each hypothesis' prediction
    inconclusive    anything else (a failed control included)

Secondary, not deciding: the twelfth rule's stall model (``predict_fa_rule12``: its three drifts fitted on the
committed rows) read with the regime keyed by M (``key_m``: rule 12 at block_n 128, i.e. ``rule11_m``'s regimes) and
keyed by the FA-only time (``key_t``: low <= 7.0 ms, high >= 10.0 ms, band between), each within max(20 us, 20 %).
And, descriptive: each variant's paired timing's SM clock and power-cap share (``paired-marks.json`` against the
``nvidia-smi -lms`` trace beside) and the idle-gap pairs of ``attention_triton_clock.py``.

    python benchmarks/fa_regime_key.py --preregister --out data/predictions/fa-regime-preregistered-h200-pcie-host.json
    python benchmarks/fa_regime_key.py --run attention-runs/<sha7>-regime \\
        --preregistered predictions/fa-regime-preregistered-h200-pcie-host.json --out data/predictions/...judged...json
"""

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import predict_fa_congestion as C  # noqa: E402
import predict_fa_rule8 as R8  # noqa: E402
import predict_fa_rule9 as R9  # noqa: E402
import predict_fa_rule10 as R10  # noqa: E402
import predict_fa_rule11 as R11  # noqa: E402
import predict_fa_rule12 as R12  # noqa: E402

from xstage.errors import InputError, exit_with  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim.predict import FaKernel  # noqa: E402
from xstage.sim.predict_congestion import predict_congested  # noqa: E402
from xstage.sim.predict_drift import L2_REGIMES  # noqa: E402

SPLIT, WB, FA = "fused_wb_split", "fused_wb", "fa"
DISCRIMINATING = ((65536, 1, 128), (73728, 1, 128), (43008, 6, 128), (47104, 6, 128))
CONTROLS = ((49152, 3, 128), (61440, 3, 128))
REPEATS = 3
M_BOUNDS = (49152, 61440)          # H_M: exposed at M <= 49152, hidden at M >= 61440
T_BOUNDS_US = (7000.0, 10000.0)    # H_T: exposed at FA-only <= 7.0 ms, hidden at FA-only >= 10.0 ms
HIDDEN_FLOOR_US, HIDDEN_FRACTION, EXPOSED_US = 20.0, 0.1, 100.0
RULE = {"hidden": "s <= max(20 us, 0.1 x f)", "exposed": "not hidden and s >= 100 us", "between": "otherwise",
        "s": "median over repeats of fused_wb_split's paired residual over FA-only (us)",
        "f": "median over repeats of fused_wb's paired residual over FA-only (us)",
        "void": "a discriminating configuration without all its repeats, or whose measured median FA-only time is "
                "not on its pre-registered side of H_T's bounds (1 head <= 7000 us, 6 heads >= 10000 us)",
        "controls": "valid iff 49152:3:128 is exposed and 61440:3:128 hidden",
        "H_M supported": "controls valid and >= 3 of the 4 discriminating configurations as H_M predicts, none as H_T",
        "H_T supported": "controls valid and >= 3 of the 4 as H_T predicts, none as H_M",
        "both refuted": "controls valid and >= 2 of the 4 against each hypothesis' prediction",
        "inconclusive": "anything else",
        "hidden_floor_us": HIDDEN_FLOOR_US, "hidden_fraction_of_fused_wb": HIDDEN_FRACTION, "exposed_us": EXPOSED_US,
        "m_bounds": list(M_BOUNDS), "t_bounds_us": list(T_BOUNDS_US), "repeats": REPEATS}


def key(c) -> str:
    return f"{c[0]}:{c[1]}:{c[2]}"


def side(x: float, bounds) -> str:
    """"exposed" at x <= bounds[0], "hidden" at x >= bounds[1], "band" between."""
    return "exposed" if x <= bounds[0] else "hidden" if x >= bounds[1] else "band"


def predicted(M: int, fa_us: float) -> dict:
    """Each hypothesis' regime at (M, FA-only time)."""
    return {"H_M": side(M, M_BOUNDS), "H_T": side(fa_us, T_BOUNDS_US)}


def classify(s: float, f: float) -> str:
    """"hidden", "exposed" or "between" of a split median s and a ``fused_wb`` median f (us; the module's rule)."""
    if not (np.isfinite(s) and np.isfinite(f)):
        raise InputError("residual", (s, f), "must be finite")
    if s <= max(HIDDEN_FLOOR_US, HIDDEN_FRACTION * f):
        return "hidden"
    return "exposed" if s >= EXPOSED_US else "between"


def verdict(classes: dict, predictions: dict, controls: dict) -> dict:
    """The pre-registered verdict. ``classes``: {config: class or "void"} of the discriminating configurations;
    ``predictions``: {config: {"H_M": regime, "H_T": regime}}; ``controls``: {config: (class, expected class)}."""
    valid = all(got == want for got, want in controls.values())
    match = {h: sum(classes[c] == predictions[c][h] for c in classes) for h in ("H_M", "H_T")}
    against = {"H_M": match["H_T"], "H_T": match["H_M"]}   # opposite predictions at every discriminating config
    if any(predictions[c]["H_M"] == predictions[c]["H_T"] or "band" in predictions[c].values() for c in classes):
        raise InputError("predictions", predictions, "must put H_M and H_T on opposite sides at every discriminating "
                                                     "configuration")
    if not valid:
        out = "inconclusive"
    elif match["H_M"] >= 3 and match["H_T"] == 0:
        out = "H_M supported"
    elif match["H_T"] >= 3 and match["H_M"] == 0:
        out = "H_T supported"
    elif against["H_M"] >= 2 and against["H_T"] >= 2:
        out = "both refuted"
    else:
        out = "inconclusive"
    return {"verdict": out, "controls_valid": valid, "as_predicted": match, "against": against,
            "void": sum(v == "void" for v in classes.values())}


def _inputs(platform_name: str):
    platform, base, m = C.rule_inputs(argparse.Namespace(out=None, platform=platform_name))
    law, tlaw, factors, d7, m8 = R8.triton_inputs(base)
    m9 = R9.measure(base, platform, m, m8, factors)
    m10 = R10.measure(base, platform, m, m8, factors)
    m11 = R11.measure(base, platform, m, m8, factors)
    m12 = R12.measure(base, platform, m, m8, factors)
    return platform, base, m, (law, tlaw, factors, d7), (m8, m9, m10, m11, m12)


def answer(r: dict, platform, m: dict, laws, ms) -> None:
    """The secondary answers of row ``r`` (rule 12 machinery): ``key_m`` (regime by M, as rule 12 at bn 128) and
    ``key_t`` (regime by the row's FA-only time, ``T_BOUNDS_US``); rules 12-9 beside."""
    law, tlaw, factors, d7 = laws
    m8, m9, m10, m11, m12 = ms
    R12.predict(r, platform, law, m, m8, m9, m10, m11, m12, d7, tlaw)
    fa = float(r["kw"]["fa_us"])
    t_regime = L2_REGIMES[("exposed", "band", "hidden").index(side(fa, T_BOUNDS_US))]
    r["key_m_E_res_us"], r["key_m_regime"] = r["rule12_E_res_us"], r["rule12_regime"]
    if r["variant"] == R9.SPLIT and not R9.no_tail(r["kw"], m12["programs"]):
        kw = R9.rule9_kw(r, m8, m12["split_drift"][t_regime], m12["programs"])
        r["key_t_E_res_us"] = float(predict_congested(FaKernel(**kw), platform, m["q_c_bytes"])["E_res_us"])
    else:
        r["key_t_E_res_us"] = r["rule12_E_res_us"]
    r["key_t_regime"] = t_regime
    if "measured_E_res_us" in r:
        for k in ("key_m", "key_t"):
            r[f"{k}_within"] = bool(R12.PP.within(r[f"{k}_E_res_us"], r["measured_E_res_us"]))


def preregister(platform_name: str = "h200-pcie-host") -> dict:
    """The pre-registration record's content: configurations, each hypothesis' regime (FA-only estimated by the
    eleventh rule's log-log fit x heads / 3), the secondary answers of every variant, and the decision rule."""
    platform, base, m, laws, ms = _inputs(platform_name)
    configs = DISCRIMINATING + CONTROLS
    rows = R12.preregistered([(M, h, d, 128) for M, h, d in configs], base, laws[2])
    for r in rows:
        answer(r, platform, m, laws, ms)
    out = []
    for c in configs:
        at = [r for r in rows if (r["M"], r["kw"]["heads"], r["kw"]["head_dim"]) == c]
        fa = float(at[0]["fa_us_interpolated"])
        pred = predicted(c[0], fa)
        out.append({"config": key(c), "M": c[0], "heads": c[1], "head_dim": c[2], "block_n": 128,
                    "role": "discriminating" if c in DISCRIMINATING else "control", "fa_us_estimate": round(fa, 1),
                    "tiles": c[1] * c[0] // 128, "predicted": pred,
                    "answers": {r["variant"]: {k: round(float(r[f"{k}_E_res_us"]), 1)
                                               for k in ("key_m", "key_t", "rule12", "rule11_m", "rule10", "rule9")}
                                for r in at}})
    return {"what": "pre-registration: what keys fused_wb_split's hiding, M (H_M) or the FA-only time (H_T)",
            "configs": out, "rule": RULE, "repeats": REPEATS, "platform": platform_name,
            "drifts": ms[4]["split_drift"], "provenance": provenance()}


def measured(folder: Path) -> dict:
    """{config: {"rep": [...], "split": [...], "wb": [...], "fa": [...]}} of a run's kernel records (us)."""
    k = load_records(folder / "attention-kernel.parquet", "kernel")[0]
    if "rep" not in k.columns:
        k = k.assign(rep=0)
    out = {}
    for (M, h, d, rep), g in k.groupby(["M", "heads", "head_dim", "rep"]):
        g = g.drop_duplicates("variant", keep="last").set_index("variant")
        if not {SPLIT, WB, FA} <= set(g.index):
            continue
        e = out.setdefault(f"{int(M)}:{int(h)}:{int(d)}", {"rep": [], "split": [], "wb": [], "fa": []})
        e["rep"].append(int(rep))
        e["split"].append(float(g.loc[SPLIT, "paired_minus_fa(us)"]))
        e["wb"].append(float(g.loc[WB, "paired_minus_fa(us)"]))
        e["fa"].append(float(g.loc[FA, "time(us)"]))
    return out


def variant_medians(folder: Path) -> dict:
    """Post hoc, judges nothing: {config: {variant: median paired residual over repeats (us), "fa": median FA-only
    time, "split_minus_hbm": the split kernel's median minus ``fused_hbm``'s (the link's share: ``fused_hbm`` is the
    same kernel storing into device memory)}}."""
    k = load_records(folder / "attention-kernel.parquet", "kernel")[0]
    out = {}
    for (M, h, d), g in k.groupby(["M", "heads", "head_dim"]):
        e = {v: float(np.median(x["paired_minus_fa(us)"])) for v, x in g.groupby("variant") if v != FA}
        e["fa"] = float(np.median(g[g["variant"] == FA]["time(us)"]))
        if SPLIT in e and "fused_hbm" in e:
            e["split_minus_hbm"] = e[SPLIT] - e["fused_hbm"]
        out[f"{int(M)}:{int(h)}:{int(d)}"] = e
    return out


def judge(pre: dict, meas: dict) -> dict:
    """The pre-registered decision on measured medians (``measured``)."""
    classes, controls, table = {}, {}, []
    for c in pre["configs"]:
        e = meas.get(c["config"])
        row = {"config": c["config"], "role": c["role"], "predicted": c["predicted"]}
        if e is None:
            row["class"] = "void"
        else:
            s, f, fa = (float(np.median(e[x])) for x in ("split", "wb", "fa"))
            row.update(split_us=e["split"], wb_us=e["wb"], fa_us=e["fa"], s=s, f=f, fa_median_us=fa,
                       n=len(e["split"]), class_=classify(s, f))
            row["class"] = row.pop("class_")
            if c["role"] == "discriminating":
                on_side = side(fa, T_BOUNDS_US) == c["predicted"]["H_T"]
                row["fa_on_preregistered_side"] = bool(on_side)
                if len(e["split"]) < pre["repeats"] or not on_side:
                    row["class"] = "void"
        if c["role"] == "discriminating":
            classes[c["config"]] = row["class"]
        else:
            controls[c["config"]] = (row["class"], c["predicted"]["H_M"])
        table.append(row)
    preds = {c["config"]: c["predicted"] for c in pre["configs"] if c["role"] == "discriminating"}
    return {"table": table, **verdict(classes, preds, controls)}


def smi_trace(path: Path) -> list:
    """[(epoch s, SM MHz, power W, reasons)] of an ``nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,
    temperature.gpu,clocks_event_reasons.active -lms`` trace (timestamps UTC)."""
    out = []
    for line in path.read_text().splitlines()[1:]:
        f = [x.strip() for x in line.split(",")]
        try:
            t = _dt.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=_dt.timezone.utc).timestamp()
            out.append((t, float(f[1].split()[0]), float(f[2].split()[0]), int(f[4], 16)))
        except (ValueError, IndexError):
            continue
    return out


CAP_FLAG = 0x4


def paired_clocks(marks: dict, trace: list) -> list:
    """Per paired-timing mark (rep, config, variant): the trace's samples inside it, their median SM clock and the
    share with the SW power-cap flag. ``marks``: ``paired-marks.json``'s content (host times shifted to UTC by its
    ``utc_offset_s`` where the host clock was not UTC: time.time() is UTC already, so no shift)."""
    t = np.array([x[0] for x in trace])
    out = []
    for mk in marks["marks"]:
        sel = [x for x, ti in zip(trace, t) if mk["host_start_s"] <= ti <= mk["host_end_s"]]
        out.append({"config": f"{mk['M']}:{mk['heads']}:{mk['head_dim']}", "rep": mk["rep"], "variant": mk["variant"],
                    "samples": len(sel), "window_ms": round(1e3 * (mk["host_end_s"] - mk["host_start_s"]), 1),
                    "sm_mhz": float(np.median([x[1] for x in sel])) if sel else None,
                    "power_w": float(np.median([x[2] for x in sel])) if sel else None,
                    "capped_share": float(np.mean([bool(x[3] & CAP_FLAG) for x in sel])) if sel else None})
    return out


def clock_summary(rows: list, variant: str = SPLIT) -> dict:
    """{config: {"sm_mhz": median, "capped_share": mean, "samples": n}} of ``variant``'s paired timings."""
    out = {}
    for c in sorted({r["config"] for r in rows}):
        g = [r for r in rows if r["config"] == c and r["variant"] == variant and r["samples"]]
        if g:
            out[c] = {"sm_mhz": float(np.median([r["sm_mhz"] for r in g])),
                      "capped_share": float(np.mean([r["capped_share"] for r in g])),
                      "samples": int(sum(r["samples"] for r in g)), "timings": len(g)}
    return out


def idle_gap(path: Path) -> list:
    """Per point of a ``clock-diag.json``: the median idle-gap pair difference of each fused kernel (us)."""
    d = json.loads(path.read_text())
    return [{"config": f"{r['M']}:{r.get('heads', 3)}:{r.get('head_dim', 128)}", "check_ok": r["check"].get("ok"),
             **{f"gapped_{n}_us": float(np.median([x["diff_us"] for x in r["gapped"][n]])) for n in r["gapped"]},
             "pairs": len(next(iter(r["gapped"].values())))} for r in d["runs"]]


def judged_rows(run: str, base: Path, platform, m, laws, ms) -> list:
    """The secondary answers at the run's measured medians (``predict_fa_rule11.run_rows``)."""
    rows = [r for r in R11.run_rows(base / run, run, laws[2]) if r["set"].endswith("#median")]
    for r in rows:
        answer(r, platform, m, laws, ms)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--platform", default="h200-pcie-host")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--preregister", action="store_true", help="write the pre-registration (before the run)")
    mode.add_argument("--run", default=None, help="the run folder under data/ to judge")
    ap.add_argument("--preregistered", default=None, help="with --run: the pre-registration record under data/")
    ap.add_argument("--out", default=None, help="write the record (.json); never over an existing file")
    args = ap.parse_args(argv)
    if args.out and Path(args.out).exists():
        raise InputError("--out", args.out, "already exists (records are never overwritten)")
    if args.preregister:
        rec = preregister(args.platform)
        for c in rec["configs"]:
            a = c["answers"]
            print(f"{c['config']:>12} {c['role']:>14} tiles {c['tiles']:>5} FA-only est {c['fa_us_estimate']:>8.0f} us "
                  f"H_M {c['predicted']['H_M']:>7} H_T {c['predicted']['H_T']:>7}  "
                  f"split key_m {a[SPLIT]['key_m']:>5.0f} key_t {a[SPLIT]['key_t']:>5.0f}  "
                  f"fused_wb {a[WB]['key_m']:>5.0f}")
        if args.out:
            C.write_record(args.out, rec, indent=1)
        return 0
    if not args.preregistered:
        raise InputError("--preregistered", None, "is needed with --run")
    platform, base, m, laws, ms = _inputs(args.platform)
    folder = base / args.run
    if not (folder / "attention-kernel.parquet").is_file():
        raise InputError("--run", args.run, "has no attention-kernel.parquet")
    pre = json.loads((base / args.preregistered).read_text())
    res = judge(pre, measured(folder))
    print(f"{'config':>12} {'role':>14} {'FA-only':>8} {'split reps':>18} {'s':>6} {'f':>6} {'class':>8} "
          f"{'H_M':>8} {'H_T':>8}")
    for r in res["table"]:
        if "s" not in r:
            print(f"{r['config']:>12} {r['role']:>14} (not measured)")
            continue
        print(f"{r['config']:>12} {r['role']:>14} {r['fa_median_us']:8.0f} "
              f"{', '.join(f'{x:.0f}' for x in r['split_us']):>18} {r['s']:6.0f} {r['f']:6.0f} {r['class']:>8} "
              f"{r['predicted']['H_M']:>8} {r['predicted']['H_T']:>8}")
    print(f"verdict: {res['verdict']} (controls valid {res['controls_valid']}; as predicted {res['as_predicted']}; "
          f"against {res['against']}; void {res['void']})")
    post = variant_medians(folder)
    print("post hoc (judges nothing): median paired residuals per variant (us)")
    for c, e in post.items():
        print(f"  {c:>12} FA-only {e['fa']:.0f}: " + ", ".join(f"{v} {x:.0f}" for v, x in e.items() if v != "fa"))
    rows = judged_rows(args.run, base, platform, m, laws, ms)
    sec = {}
    for r in rows:
        for k in ("key_m", "key_t", "rule12", "rule11_m"):
            g = sec.setdefault(f"{r['variant']} {k}", [0, 0])
            g[0] += int(r[f"{k}_within"])
            g[1] += 1
        if r["variant"] == SPLIT:
            print(f"  secondary {r['M']:>6} H{r['kw']['heads']}: split measured {r['measured_E_res_us']:.0f}, "
                  f"key_m {r['key_m_E_res_us']:.0f} ({r['key_m_regime']}), key_t {r['key_t_E_res_us']:.0f} "
                  f"({r['key_t_regime']})")
    for k, (w, n) in sorted(sec.items()):
        print(f"  within target {k}: {w}/{n}")
    clocks = idle = None
    if (folder / "paired-marks.json").is_file() and (folder / "smi-trace.csv").is_file():
        pc = paired_clocks(json.loads((folder / "paired-marks.json").read_text()), smi_trace(folder / "smi-trace.csv"))
        clocks = {"split": clock_summary(pc), "fused_wb": clock_summary(pc, WB), "rows": pc}
        for c, v in clocks["split"].items():
            print(f"  paired clock {c:>12}: split SM {v['sm_mhz']:.0f} MHz, capped {v['capped_share']:.2f} "
                  f"({v['samples']} samples)")
    if (folder / "clock" / "clock-diag.json").is_file():
        idle = idle_gap(folder / "clock" / "clock-diag.json")
        for r in idle:
            print(f"  idle-gap {r['config']:>12}: " + ", ".join(f"{k} {v:.0f}" for k, v in r.items()
                                                               if k.startswith("gapped_")))
    if args.out:
        keep = ("set", "M", "variant", "measured_E_res_us", "spread", "key_m_E_res_us", "key_t_E_res_us",
                "key_m_regime", "key_t_regime", "key_m_within", "key_t_within", "rule12_E_res_us", "rule11_m_E_res_us",
                "rule12_within", "rule11_m_within")
        record = {"what": "judged: what keys fused_wb_split's hiding, M (H_M) or the FA-only time (H_T)",
                  "run": args.run, "preregistered": args.preregistered,
                  "preregistration_commit": pre["provenance"]["git_commit"], **res,
                  "secondary": {"within": sec, "rows": [R12._rounded({k: r[k] for k in keep if k in r}
                                                                      | {"heads": r["kw"]["heads"],
                                                                         "fa_us": r["kw"]["fa_us"]}) for r in rows]},
                  "post_hoc_variant_medians": R12._rounded(post), "paired_clocks": clocks, "idle_gap": idle, "rules_commit": C._commit(), "provenance": provenance()}
        C.write_record(args.out, record, indent=1)
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_regime_key.py")
