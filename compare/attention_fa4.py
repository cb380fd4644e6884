"""The per-M summary of the FA4 runs' kernel records (built by ``hw/attention/fa4_records.py``; pure numpy).

Summary per M: fa_vs_sdpa = cuDNN / FA4 time; Serial-best = the fastest FA (FA4, cuDNN, PersistentSm90) + CE;
the best unfused = the fastest of Serial-best and the pipelined variants; for each fused variant its
paired residual E_res (fused − FA4, matched pairs), the paired hiding ratio
H = 1 − E_res / (serial_fa4 − FA4)_paired (Eq. 21 with the transfer FA4's serial path adds), and its
speedups over Serial-best and over the best unfused variant. The bench writes ``summary_file(rows)`` as
``attention-fa4-summary.json`` beside its records (``xstage.cli.bench_fa4`` hands it over);
``xstage.compare.attention_records`` builds the committed runs' rows from it.
"""

import numpy as np

EXPERIMENT = "attention-fa4"  # the experiment of the FA4 kernel records


SERIAL = ("serial_fa4", "serial_cudnn", "serial_pfa4")  # Serial: the FA, then the copy engine
PERS = "_pers"  # fused variants with PersistentSm90 (hw/attention/fa4_persistent.py)


def own_fa(name: str):
    """The FA-only variant of a fused PersistentSm90 variant: fused_vmm_pers -> pfa4, fused_vmm_pers_lsu -> pfa4_lsu."""
    return "pfa4" + name.split(PERS, 1)[1] if PERS in name else None


def _best(times: dict, names) -> tuple:
    have = [(times[n], n) for n in names if n in times]
    return min(have) if have else (float("nan"), None)


def summarise(rows: list) -> list:
    """One summary dict per M from kernel rows (one row per variant and M)."""
    out = []
    for M in sorted({r["M"] for r in rows}):
        at = {r["variant"]: r for r in rows if r["M"] == M}
        t = {n: r["time(us)"] for n, r in at.items()}
        paired = {n: r.get("paired_minus_fa(us)") for n, r in at.items()
                  if r.get("paired_minus_fa(us)") is not None and np.isfinite(r.get("paired_minus_fa(us)"))}
        flops = next(iter(at.values()))["flops"]
        s = {"M": int(M)}
        fa, cd = t.get("fa4"), t.get("cudnn")
        s.update(fa4_us=fa, cudnn_us=cd, ce_us=t.get("ce"), serial_fa4_us=t.get("serial_fa4"),
                 serial_cudnn_us=t.get("serial_cudnn"))
        if fa:
            s["fa_tflops"] = flops / fa / 1e6
        if cd:
            s["sdpa_tflops"] = flops / cd / 1e6
        if fa and cd:
            s["fa_vs_sdpa"] = cd / fa
        s["serial_best_us"], s["serial_best_is"] = _best(t, SERIAL)
        s["pipelined_best_us"], s["pipelined_best_is"] = _best(t, [n for n in t if n.startswith("pipelined")])
        s["best_unfused_us"], s["best_unfused_is"] = _best(t, SERIAL + tuple(n for n in t if n.startswith("pipelined")))
        for p in sorted(n for n in t if n.startswith("pfa4")):  # PersistentSm90 kernels' FA-only (fa4_persistent)
            s.update({f"{p}_us": t[p], f"{p}_tflops": flops / t[p] / 1e6, f"{p}_vs_fa4": fa / t[p] if fa else None,
                      f"{p}_vs_sdpa": cd / t[p] if cd else None, f"{p}_minus_fa4_paired_us": paired.get(p)})
        transfer = paired.get("serial_fa4")
        s["serial_fa4_minus_fa_paired_us"] = transfer
        fused = {}
        for name in sorted(n for n in t if n.startswith("fused")):
            d = {"us": t[name]}
            if fa:
                d["vs_fa_only"] = fa / t[name]
            if name in paired:
                d["e_res_paired_us"] = paired[name]
                if fa:
                    d["e_res_paired_frac"] = paired[name] / fa
                if transfer:
                    d["hiding_ratio_paired"] = 1.0 - paired[name] / transfer
            own = own_fa(name)
            if own in t:  # residual against its own FA-only (paired: both against stock FA4)
                d["vs_own_fa_only"] = t[own] / t[name]
                if name in paired and own in paired:
                    d["e_res_own_paired_us"] = paired[name] - paired[own]
                    d["e_res_own_paired_frac"] = d["e_res_own_paired_us"] / t[own]
            for key, base in (("speedup_vs_serial_best", s["serial_best_us"]),
                              ("speedup_vs_best_unfused", s["best_unfused_us"])):
                if base == base:  # not NaN
                    d[key] = base / t[name]
            fused[name] = d
        s["fused"] = fused
        real = {n: d for n, d in fused.items() if not n.startswith("fused_hbm")}  # sends nothing: a diagnostic
        if real:
            best = min(real, key=lambda n: real[n]["us"])
            s["best_fused_is"], s["best_fused_us"] = best, real[best]["us"]
            for key in ("e_res_paired_us", "hiding_ratio_paired", "speedup_vs_serial_best", "speedup_vs_best_unfused"):
                if key in real[best]:
                    s[f"best_fused_{key}"] = real[best][key]
        pers = {n: d for n, d in real.items() if PERS in n}  # every PersistentSm90 kernel (drain, stagger, ...)
        if pers:
            best = min(pers, key=lambda n: pers[n]["us"])
            s["best_pers_is"], s["best_pers_us"] = best, pers[best]["us"]
            for key in ("vs_own_fa_only", "e_res_paired_us", "e_res_own_paired_us", "e_res_own_paired_frac",
                        "hiding_ratio_paired", "speedup_vs_serial_best", "speedup_vs_best_unfused"):
                if key in pers[best]:
                    s[f"best_pers_{key}"] = pers[best][key]
        out.append(s)
    return out


TARGETS = "fa_vs_sdpa >= 1 (M >= 16K); best fused within 3 % of FA-only (M >= 16K); speedup_vs_serial_best > 1 (>= 1.08 at M >= 16K)"
# runs with PersistentSm90 add pers_within_3pct_of_own_fa: its best fused variant's paired residual against its
# own FA-only (not stock FA4's) <= 3 % at M >= 16K


def targets(summary: dict) -> dict:
    """Issue 16's targets at one M: True / False, None where not measured."""
    M, big = summary["M"], summary["M"] >= 16384
    fvs = summary.get("fa_vs_sdpa")
    res = summary.get("best_fused_e_res_paired_us")
    fa = summary.get("fa4_us")
    sp = summary.get("best_fused_speedup_vs_serial_best")
    own = summary.get("best_pers_e_res_own_paired_frac")
    pers = {"pers_within_3pct_of_own_fa": None if own is None or not big else own <= 0.03} \
        if "best_pers_is" in summary else {}
    return {"M": M, **pers,
            "fa_vs_sdpa_ge_1": None if fvs is None or not big else fvs >= 1.0,
            "fused_within_3pct": None if res is None or not fa or not big else res / fa <= 0.03,
            "beats_serial_best": None if sp is None else sp > (1.08 if big else 1.0)}


def table(summaries: list) -> str:
    """A short printable table of the summaries."""
    cols = ("M", "fa4_us", "cudnn_us", "fa_vs_sdpa", "serial_best_us", "pipelined_best_us", "best_fused_is",
            "best_fused_us", "best_fused_e_res_paired_us", "best_fused_hiding_ratio_paired",
            "best_fused_speedup_vs_best_unfused")
    lines = [" ".join(f"{c:>14.14}" for c in cols)]
    for s in summaries:
        cells = []
        for c in cols:
            v = s.get(c)
            cells.append(f"{v:>14.3f}" if isinstance(v, float) else f"{str(v):>14.14}")
        lines.append(" ".join(cells))
    return "\n".join(lines)


def summary_file(rows: list) -> dict:
    """The run's ``attention-fa4-summary.json``: the targets, the per-M summaries and which targets each met."""
    summaries = summarise(rows)
    return {"targets": TARGETS, "per_M": summaries, "met": [targets(s) for s in summaries]}
