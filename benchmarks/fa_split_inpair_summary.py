"""The in-pair tile logs of ``benchmarks/gpu/fa_split_inpair.py``: where the split kernel's residual goes, and the
pre-registered mechanism verdict (issue 15 item 5; ``data/attention-extra/inpair-preregistration.md``).

Per configuration (M, heads) of a run folder:

- s, f: the medians over repeats of ``fused_wb_split``'s and ``fused_wb``'s standard paired residuals (the bench's
  uninstrumented timing), and the class by the 8c8a959-regime rule: hidden if s <= max(20 us, 0.1 f), else
  exposed if s >= 100 us, else between.
- From every in-pair pair (FA-only and the split kernel launched back to back, both instrumented, repeats pooled;
  medians over pairs): ``d_event`` the split launch's event time minus FA-only's; ``a_us`` the split kernel's extra
  Q-loop cycles per program (mean over the 132 programs of each launch's summed Q-loop cycles, split minus FA-only)
  at FA-only's clock of that pair; ``b_us`` the rest of the per-program Q-loop time difference (the clock's part:
  d_qloop - a); ``df`` the split launch's cycle-weighted SM clock over FA-only's, minus 1; ``c_us`` the extra issue
  time per program; ``d_hbm`` the same split build into device memory minus FA-only (its own block of pairs).
- ``reproduced``: |d_event - s| <= max(30 us, 0.3 |s|) (the instrumented pairs show the residual they explain).
- ``reading`` of a hidden configuration: ``clock`` if a >= 30 us and b <= -0.5 a (the stalls are there and a faster
  clock pays for them), ``absorbed`` if a >= 30 us and b > -0.5 a (the stalls are there at the same clock and the
  launch does not lengthen), ``no_stall`` if a < 30 us; of an exposed one: ``clock`` if b <= -0.5 a else ``plain``.

Verdict (``verdict``): over the reproduced hidden and exposed configurations, H_clock is supported if every hidden one
reads ``clock`` (at least one) and no exposed one does; H_stall (what hides is the stalls' absence) if every hidden one
reads ``no_stall``; H_absorbed if every hidden one reads ``absorbed``; otherwise mixed.

The offset reading (``offset_rows`` / ``offset_verdict``; pre-registered for the second run in
``data/attention-extra/rule13-preregistration.md``): per configuration the link's cost L = median d_event of the
split block minus median d_event of the ``split_hbm`` block, and the build offset beta_c = -median over pairs of
(split_hbm - FA-only) / FA-only. Supported: L >= 60 us and 0.005 <= beta_c <= 0.013 at every configuration;
refuted: L < 30 us at any configuration with FA-only >= 10 ms (the link's cost vanishing in long kernels);
otherwise partial.

    python benchmarks/fa_split_inpair_summary.py attention-runs/<run> [--out data/predictions/<record>.json]
"""

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from xstage.paths import data_dir
from xstage.provenance import provenance
from xstage.records import atomic_write_text, load_records

SPLIT, WB, FA, HBM = "fused_wb_split", "fused_wb", "fa", "split_hbm"
A_MIN_US = 30.0


def classify(s: float, f: float) -> str:
    if s <= max(20.0, 0.1 * f):
        return "hidden"
    return "exposed" if s >= 100.0 else "between"


def pair_rows(launch: pd.DataFrame, block: str = SPLIT) -> pd.DataFrame:
    """One row per in-pair pair of ``block`` (``inpair-launch.parquet``'s record columns): d_event, d_qloop, a_us,
    b_us, df, c_us, fa_mhz, split_mhz, fa_event_us."""
    b = launch[launch["block"] == block]
    key = ["rep", "M", "heads", "pair"]
    x = b[b["variant"] == block].set_index(key)
    y = b[b["variant"] == FA].set_index(key)
    j = x.merge(y, left_index=True, right_index=True, suffixes=("_s", "_f"))
    out = pd.DataFrame(index=j.index)
    out["d_event"] = j["event(us)_s"] - j["event(us)_f"]
    out["d_qloop"] = j["qloop_prog_mean(us)_s"] - j["qloop_prog_mean(us)_f"]
    out["a_us"] = (j["qloop_mcycles_prog_mean_s"] - j["qloop_mcycles_prog_mean_f"]) * 1e6 / j["mhz_f"]
    out["b_us"] = out["d_qloop"] - out["a_us"]
    out["df"] = j["mhz_s"] / j["mhz_f"] - 1
    out["c_us"] = (j["issue_sum(us)_s"] - j["issue_sum(us)_f"]) / 132
    out["fa_mhz"], out["split_mhz"] = j["mhz_f"], j["mhz_s"]
    out["fa_event_us"] = j["event(us)_f"]
    return out.reset_index()


def reading(cls: str, a: float, b: float) -> str:
    if cls == "hidden":
        if a < A_MIN_US:
            return "no_stall"
        return "clock" if b <= -0.5 * a else "absorbed"
    if cls == "exposed":
        return "clock" if a >= A_MIN_US and b <= -0.5 * a else "plain"
    return "between"


def summary(kernel: pd.DataFrame, launch: pd.DataFrame) -> list:
    k = kernel[kernel["variant"].isin([SPLIT, WB])]
    std = k.pivot_table(index=["M", "heads"], columns="variant", values="paired_minus_fa(us)", aggfunc="median")
    fa = kernel[kernel["variant"] == FA].groupby(["M", "heads"])["time(us)"].median()
    pr = pair_rows(launch).groupby(["M", "heads"]).median(numeric_only=True)
    ph = pair_rows(launch, HBM).groupby(["M", "heads"]).median(numeric_only=True)
    out = []
    for (M, h), r in std.iterrows():
        s, f = float(r[SPLIT]), float(r[WB])
        cls = classify(s, f)
        row = {"M": int(M), "heads": int(h), "fa_us": float(fa.loc[(M, h)]), "s_us": s, "f_us": f, "class": cls}
        if (M, h) in pr.index:
            p = pr.loc[(M, h)]
            row.update({c: float(p[c]) for c in ("d_event", "d_qloop", "a_us", "b_us", "df", "c_us", "fa_mhz",
                                                 "split_mhz")})
            row["d_hbm"] = float(ph.loc[(M, h), "d_event"]) if (M, h) in ph.index else None
            row["a_hbm_us"] = float(ph.loc[(M, h), "a_us"]) if (M, h) in ph.index else None
            row["reproduced"] = bool(abs(row["d_event"] - s) <= max(30.0, 0.3 * abs(s)))
            row["reading"] = reading(cls, row["a_us"], row["b_us"])
        out.append(row)
    return out


def verdict(rows: list) -> dict:
    use = [r for r in rows if r.get("reproduced") and r["class"] in ("hidden", "exposed")]
    hid = [r["reading"] for r in use if r["class"] == "hidden"]
    exp = [r["reading"] for r in use if r["class"] == "exposed"]
    if hid and all(x == "clock" for x in hid) and not any(x == "clock" for x in exp):
        v = "H_clock supported"
    elif hid and all(x == "no_stall" for x in hid):
        v = "H_stall supported"
    elif hid and all(x == "absorbed" for x in hid):
        v = "H_absorbed supported"
    else:
        v = "mixed" if hid else "no reproduced hidden configuration"
    return {"verdict": v, "hidden_readings": hid, "exposed_readings": exp,
            "not_reproduced": [f"{r.get('M')}:{r.get('heads')}" for r in rows if r.get("reproduced") is False]}


def offset_rows(launch: pd.DataFrame) -> list:
    """Per configuration: d_split, d_hbm (medians over pairs), the link's cost L and the build offset beta_c."""
    ps, ph = pair_rows(launch), pair_rows(launch, HBM)
    ph = ph.assign(rel=ph["d_event"] / ph["fa_event_us"])
    out = []
    for (M, h), g in ps.groupby(["M", "heads"]):
        gh = ph[(ph["M"] == M) & (ph["heads"] == h)]
        if gh.empty:
            continue
        ds, dh = float(g["d_event"].median()), float(gh["d_event"].median())
        out.append({"M": int(M), "heads": int(h), "fa_event_us": float(g["fa_event_us"].median()), "d_split": ds,
                    "d_hbm": dh, "link_us": ds - dh, "beta_c": float(-gh["rel"].median()), "pairs": int(len(g))})
    return out


def offset_verdict(rows: list) -> str:
    if any(r["link_us"] < 30.0 and r["fa_event_us"] >= 10000.0 for r in rows):
        return "refuted"
    if rows and all(r["link_us"] >= 60.0 and 0.005 <= r["beta_c"] <= 0.013 for r in rows):
        return "supported"
    return "partial"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a run folder under data/")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    folder = data_dir() / args.run
    for name in ("attention-kernel.parquet", "inpair-launch.parquet"):
        if not (folder / name).exists():
            print(f"run: {args.run} lacks {name}", file=sys.stderr)
            return 2
    kernel = load_records(folder / "attention-kernel.parquet", "kernel")[0]
    launch = load_records(folder / "inpair-launch.parquet", "summary", table="frame")[0]
    rows = summary(kernel, launch)
    v = verdict(rows)
    for r in rows:
        extra = "" if "d_event" not in r else (
            f"; in-pair d {r['d_event']:.0f} (hbm {r['d_hbm']:.0f}), A {r['a_us']:.0f}, B {r['b_us']:.0f}, "
            f"df {100 * r['df']:+.2f} %, C {r['c_us']:.1f}, MHz {r['fa_mhz']:.0f}/{r['split_mhz']:.0f}, "
            f"reproduced {r['reproduced']}, {r['reading']}")
        print(f"M={r['M']} H={r['heads']}: FA-only {r['fa_us']:.0f} us, s {r['s_us']:.0f}, f {r['f_us']:.0f}, "
              f"{r['class']}{extra}")
    print(f"verdict: {v['verdict']} (hidden {v['hidden_readings']}, exposed {v['exposed_readings']}, "
          f"not reproduced {v['not_reproduced']})")
    off = offset_rows(launch)
    for r in off:
        print(f"M={r['M']} H={r['heads']}: FA-only {r['fa_event_us']:.0f} us (event), split {r['d_split']:.0f}, "
              f"split_hbm {r['d_hbm']:.0f}, link L {r['link_us']:.0f} us, beta_c {r['beta_c']:.4f} "
              f"({r['pairs']} pairs)")
    ov = offset_verdict(off)
    print(f"offset reading: {ov}")
    if args.out:
        atomic_write_text(Path(args.out), json.dumps({"run": args.run, "rows": rows, **v, "a_min_us": A_MIN_US,
                                                      "offset_rows": off, "offset_verdict": ov,
                                                      "provenance": provenance()}, indent=1), overwrite=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
