"""Does the host calibration grid agree with itself? fresh11 and fresh12 measured again (issue 15, session 14, knee18),
scored exactly as pre-registered in data/calibration-extra/knee18-preregistration.md (docs/calibration/knee18.md).

    python benchmarks/calib_knee18.py score --json OUT      # 2 grids x 2 models x 5 seeds = 20 refits; ~3 min
    python benchmarks/calib_knee18.py posthoc --json OUT    # POST HOC, read after the score; ~20 s

Per grid: the committed run ``c`` (``h200-pcie-host-<grid>``) and the repeats that exist (``-r2``, ``-r3``). Points
are matched by (phase, mode, K, B, step) (``matched``); "A as the prediction of B" at a lockstep periodic point is
e = T_A / T_B - 1. **(a)** the share of |e_T_iss| <= 0.15 over every point and ordered pair of distinct runs, and per
``bracket`` seed s the held-out half's median / p90 of |e| per ordered pair; **the instrument's figure at s is the
median over the ordered pairs** (``instrument_heldout``), beside the model's pre-registered score on the same half.
**(b)** the named near-knee pairs' zero-gap and plateau T_iss in each run; a pair reproduces iff every repeat is
within 15 % of the committed value at both. **(c)** ``two-stage-lockq`` and ``two-stage-gated2-span-cc`` fitted on
the committed run's ``bracket`` fit half (the product's refit, as the pre-registered scores; checked equal to them)
and judged on each repeat's held-out half. **Rule** (``verdict``): "beyond the instrument" on a grid iff the
instrument's held-out T_iss p90 > 0.15 at >= 2 of 5 seeds; "within the instrument" iff all four checks hold for the
instrument at >= 4 of 5 seeds; else "at the edge". The JSON is written atomically and never overwrites a file.

``posthoc`` (read after the score; decides nothing): each run's own trial spread (``T_iss_spread``, max / min - 1
over its 5 trials) on each seed's held-out lockstep points, and the named pairs' zero-gap and plateau T_iss as
``two-stage-lockq`` fitted on the committed run's ``bracket`` seed-0 fit half predicts them on each run (at zero gap
the model check reads the run's own measured gap, so its prediction moves with the run).
"""
import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import EXTRA, FIGS, FRACTION, all_four  # noqa: E402
from calib_knee10 import grid_points, refuse_existing, write_new  # noqa: E402
from calib_knee14 import judge  # noqa: E402
from xstage.hw.calib.calibrate import refit  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim.platform import Platform  # noqa: E402
from xstage.sim.split_sweeps import split_by_rule  # noqa: E402

KiB = 1024
GRIDS = ("fresh11", "fresh12")
REPEATS = ("r2", "r3")
SEEDS = (0, 1, 2, 3, 4)
LIMIT, MEDIAN, P90, BEYOND_SEEDS, WITHIN_SEEDS = 0.15, 0.05, 0.15, 2, 4
KEY = ["phase", "mode", "producers", "bytes_per_producer", "step"]
MODELS = {"fresh11": ("two-stage-gated2-span-cc", "two-stage-lockq"),
          "fresh12": ("two-stage-lockq", "two-stage-gated2-span-cc")}     # the first is the grid's scored model
SCORES = {"fresh11": EXTRA / "fresh11-scores.json", "fresh12": EXTRA / "fresh12-scores.json"}
PAIRS_KiB = {"fresh11": ((62, 36), (92, 30), (122, 26), (122, 36), (62, 56), (62, 40)),
             "fresh12": ((68, 32), (100, 28), (126, 24), (42, 44), (126, 28), (100, 38), (17, 14), (100, 14),
                         (68, 20))}
DECIDING = {"fresh11": ((62, 36), (92, 30), (122, 26)), "fresh12": ((68, 32), (100, 28), (126, 24))}


def runs_of(grid: str, repeats=REPEATS) -> dict:
    """{"c": committed points, "r2": ..., "r3": ...} for the repeats whose folder exists."""
    out = {"c": grid_points("host", grid)}
    for r in repeats:
        if (EXTRA / f"h200-pcie-host-{grid}-{r}" / "points.parquet").is_file():
            out[r] = grid_points("host", f"{grid}-{r}")
    return out


def matched(runs: dict) -> pd.DataFrame:
    """The lockstep periodic points of every run joined on (phase, mode, K, B, step): one row per point, columns
    ``T_iss(us)_<run>`` and ``period(us)_<run>``; step is the n-th point of its (phase, mode, K, B) in record order."""
    out = None
    for name, pts in runs.items():
        p = pts[pts["mode"] == "periodic"].copy()
        p["step"] = p.groupby(KEY[:-1]).cumcount()
        p = p[KEY + ["T_iss(us)", "period(us)"]].rename(columns={"T_iss(us)": f"T_iss(us)_{name}",
                                                                  "period(us)": f"period(us)_{name}"})
        out = p if out is None else out.merge(p, on=KEY, how="inner")
    return out.reset_index(drop=True)


def ordered_pairs(names) -> list:
    """Every (A, B) of distinct runs: A predicts B."""
    return list(itertools.permutations(names, 2))


def rel(m: pd.DataFrame, a: str, b: str, what: str = "T_iss") -> np.ndarray:
    """e = A / B - 1 per matched point (A as the prediction of B); NaN where either is missing or B <= 0."""
    x, y = m[f"{what}(us)_{a}"].to_numpy(float), m[f"{what}(us)_{b}"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(y > 0, x / y - 1.0, np.nan)


def _q(e) -> dict:
    e = np.abs(np.asarray(e, float))
    e = e[np.isfinite(e)]
    return {"median": float(np.median(e)), "p90": float(np.percentile(e, 90)), "n": int(e.size)} if e.size else \
        {"median": float("nan"), "p90": float("nan"), "n": 0}


def share_within(m: pd.DataFrame, names, limit: float = LIMIT, what: str = "T_iss") -> dict:
    """(a1): the share of |e| <= limit over every matched point and ordered pair, and per ordered pair."""
    per, every = {}, []
    for a, b in ordered_pairs(names):
        e = np.abs(rel(m, a, b, what))
        e = e[np.isfinite(e)]
        per[f"{a}->{b}"] = float((e <= limit).mean())
        every.append(e)
    e = np.concatenate(every)
    return {"all": float((e <= limit).mean()), "n": int(e.size), "by_pair": per}


def heldout_mask(m: pd.DataFrame, held_pairs) -> np.ndarray:
    """The matched rows whose (K, B) pair is in ``held_pairs`` (bytes)."""
    held = {(int(k), int(b)) for k, b in held_pairs}
    return np.array([(int(k), int(b)) in held for k, b in zip(m["producers"], m["bytes_per_producer"])])


def held_pairs_of(points, seed: int) -> set:
    s = split_by_rule(points, "bracket", FRACTION, seed).reindex(points.index).to_numpy()
    return {(int(k), int(b)) for k, b, x in zip(points["producers"], points["bytes_per_producer"], s) if x == "heldout"}


def instrument_heldout(m: pd.DataFrame, names, mask, truth=None) -> dict:
    """(a2) on the rows of ``mask``: median / p90 of |e| (T_iss, period) per ordered pair (A, B) (only B = ``truth``
    where given) and their median over the pairs -- the instrument's figures; ``mean_of_others`` (secondary): B
    predicted by the mean of the other runs, the median over B."""
    sub = m[mask]
    pairs = [(a, b) for a, b in ordered_pairs(names) if truth is None or b == truth]
    per = {f"{a}->{b}": {w: _q(rel(sub, a, b, w)) for w in ("T_iss", "period")} for a, b in pairs}
    out = {f"{stat}_{w}": float(np.median([p[w][stat] for p in per.values()]))
           for w in ("T_iss", "period") for stat in ("median", "p90")}
    out["by_pair"] = per
    if truth is None and len(names) > 2:
        mo = []
        for b in names:
            pred = np.mean([sub[f"T_iss(us)_{a}"].to_numpy(float) for a in names if a != b], axis=0)
            y = sub[f"T_iss(us)_{b}"].to_numpy(float)
            with np.errstate(divide="ignore", invalid="ignore"):
                mo.append(_q(np.where(y > 0, pred / y - 1.0, np.nan)))
        out["mean_of_others_T_iss"] = {"median": float(np.median([q["median"] for q in mo])),
                                       "p90": float(np.median([q["p90"] for q in mo]))}
    return out


def instrument_all_four(r: dict) -> bool:
    return (r["median_T_iss"] <= MEDIAN and r["p90_T_iss"] <= P90 and r["median_period"] <= MEDIAN
            and r["p90_period"] <= P90)


def verdict(by_seed: list) -> str:
    """The pre-registered rule on one grid's five instrument rows (``instrument_heldout``)."""
    over = sum(r["p90_T_iss"] > P90 for r in by_seed)
    if over >= BEYOND_SEEDS:
        return "beyond the instrument"
    if sum(instrument_all_four(r) for r in by_seed) >= WITHIN_SEEDS:
        return "within the instrument"
    return "at the edge"


def overall(verdicts: dict, grids=GRIDS) -> str:
    """The pre-registered call on the small-host-grid target: both grids "beyond" or both "within"; a grid with no
    repeat is "not measured" and makes neither claim."""
    v = {g: verdicts.get(g, "not measured") for g in grids}
    if set(v.values()) == {"beyond the instrument"}:
        return "beyond the instrument"
    if set(v.values()) == {"within the instrument"}:
        return "a model gap"
    return "neither claimed: " + "; ".join(f"{g} {x}" for g, x in v.items())


def pair_rows(runs: dict, pairs_KiB) -> list:
    """(b): per named pair, the zero-gap (rate) and plateau T_iss of each run and whether every repeat is within
    15 % of the committed value at both."""
    rows = []
    for k, b in pairs_KiB:
        r = {"K": k, "B_KiB": b}
        for phase in ("rate", "plateau"):
            for name, pts in runs.items():
                at = pts[(pts["phase"] == phase) & (pts["producers"] == k) & (pts["bytes_per_producer"] == b * KiB)]
                r[f"{phase}_{name}_us"] = float(at["T_iss(us)"].median()) if len(at) else float("nan")
        new = [n for n in runs if n != "c"]
        r["reproduces"] = bool(new) and all(abs(r[f"{ph}_{n}_us"] / r[f"{ph}_c_us"] - 1) <= LIMIT
                                            for ph in ("rate", "plateau") for n in new)
        rows.append(r)
    return rows


def committed_figures(grid: str, model: str, seed: int):
    """The pre-registered score's row of (grid, model, bracket, seed), or None where it was not scored there."""
    for r in json.loads(SCORES[grid].read_text())["rows"]:
        if r["target"] == "host" and r["model"] == model and r["rule"] == "bracket" and r["seed"] == seed:
            return r
    return None


def refit_rows(grid: str, runs: dict, log=print) -> list:
    """(c): each model refitted through the product on the committed run's ``bracket`` fit half, judged on every
    run's held-out half (the same pairs)."""
    rows = []
    for model in MODELS[grid]:
        for seed in SEEDS:
            with tempfile.TemporaryDirectory() as d:
                out = Path(d) / "o"
                s = refit(out, records=EXTRA / f"h200-pcie-host-{grid}", split_args=(FRACTION, seed, "bracket"),
                          model=model)
                plat = Platform.load(out / "platform.json")
                fitted, _ = load_records(out / "points.parquet", "point")
            want = committed_figures(grid, model, seed)
            for k in FIGS:
                if want is not None:
                    assert abs(s[f"heldout_{k}"] - want[f"heldout_{k}"]) < 1e-9, (grid, model, seed, k)
            for name, pts in runs.items():
                j = judge(plat, pts, split_by_rule(pts, "bracket", FRACTION, seed).reindex(pts.index))
                if name == "c":
                    assert abs(j["heldout_p90_rel_err_T_iss"] - s["heldout_p90_rel_err_T_iss"]) < 1e-12
                r = {"grid": grid, "model": model, "seed": seed, "run": name,
                     **{f"heldout_{k}": j[f"heldout_{k}"] for k in FIGS}, "misses": j["misses"],
                     "committed_score_matches": want is not None}
                r["all_four"] = all_four(r)
                rows.append(r)
                log(f"(c) {grid} {model:24s} seed {seed} on {name}: T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
                    f"{r['heldout_p90_rel_err_T_iss']:.1%} period p90 {r['heldout_p90_rel_err_period']:.1%} "
                    f"{'met' if r['all_four'] else 'not met'} misses {r['misses']}", flush=True)
    return rows


def _run_meta(grid: str, name: str) -> dict:
    folder = EXTRA / (f"h200-pcie-host-{grid}" + ("" if name == "c" else f"-{name}"))
    _, meta = load_records(folder / "points.parquet", "point")
    prov = meta.get("provenance") or {}
    gpu = prov.get("gpu") or {}
    return {"records": str(folder.relative_to(EXTRA.parents[1])), "git_commit": prov.get("git_commit"),
            "date": prov.get("date"), "gpu_uuid": gpu.get("gpu_uuid"), "driver": gpu.get("driver")}


def score(log=print) -> dict:
    out = {"pre_registered": True, "preregistration": "data/calibration-extra/knee18-preregistration.md",
           "grids": {}}
    verdicts = {}
    for grid in GRIDS:
        runs = runs_of(grid)
        names = list(runs)
        g = {"runs": {n: _run_meta(grid, n) for n in names}}
        if len(names) < 2:
            g["note"] = "no repeat came back: nothing scored"
            out["grids"][grid] = g
            continue
        m = matched(runs)
        g["matched_points"] = int(len(m))
        g["points_per_run"] = {n: int((p["mode"] == "periodic").sum()) for n, p in runs.items()}
        g["share_within_15"] = {w: share_within(m, names, what=w) for w in ("T_iss", "period")}
        log(f"(a1) {grid}: {len(m)} matched lockstep points; |e_T_iss| <= 15 %: "
            f"{g['share_within_15']['T_iss']['all']:.1%} {g['share_within_15']['T_iss']['by_pair']}", flush=True)
        g["instrument"], g["instrument_vs_committed"] = [], []
        for seed in SEEDS:
            held = held_pairs_of(runs["c"], seed)
            for n in names[1:]:
                assert held_pairs_of(runs[n], seed) == held, (grid, n, seed)
            mask = heldout_mask(m, held)
            model = committed_figures(grid, MODELS[grid][0], seed)
            r = {"seed": seed, "n_points": int(mask.sum()), **instrument_heldout(m, names, mask),
                 "model": MODELS[grid][0], "model_median_T_iss": model["heldout_median_rel_err_T_iss"],
                 "model_p90_T_iss": model["heldout_p90_rel_err_T_iss"]}
            r["all_four"] = instrument_all_four(r)
            g["instrument"].append(r)
            vc = {"seed": seed, **instrument_heldout(m, names, mask, truth="c")}
            g["instrument_vs_committed"].append(vc)
            log(f"(a2) {grid} seed {seed} (n {r['n_points']}): instrument T_iss {r['median_T_iss']:.1%} / "
                f"{r['p90_T_iss']:.1%} period {r['median_period']:.1%} / {r['p90_period']:.1%}; new->c "
                f"{vc['median_T_iss']:.1%} / {vc['p90_T_iss']:.1%}; mean-of-others p90 "
                f"{r.get('mean_of_others_T_iss', {}).get('p90', float('nan')):.1%}; model {r['model']} "
                f"{r['model_median_T_iss']:.1%} / {r['model_p90_T_iss']:.1%}", flush=True)
        verdicts[grid] = g["verdict"] = verdict(g["instrument"])
        g["seeds_over_15"] = int(sum(r["p90_T_iss"] > P90 for r in g["instrument"]))
        g["pairs"] = pair_rows(runs, PAIRS_KiB[grid])
        for r in g["pairs"]:
            log(f"(b) {grid} ({r['K']}, {r['B_KiB']}) zero gap " +
                " / ".join(f"{r[f'rate_{n}_us']:.2f}" for n in names) + "  plateau " +
                " / ".join(f"{r[f'plateau_{n}_us']:.2f}" for n in names) +
                f"  {'reproduces' if r['reproduces'] else 'does not reproduce'}", flush=True)
        g["deciding_pairs_reproduce"] = {f"({k}, {b})": next(r["reproduces"] for r in g["pairs"]
                                                              if (r["K"], r["B_KiB"]) == (k, b))
                                         for k, b in DECIDING[grid]}
        g["refits"] = refit_rows(grid, runs, log)
        out["grids"][grid] = g
        log(f"{grid}: {g['verdict']} (instrument T_iss p90 > 15 % at {g['seeds_over_15']} of 5 seeds)", flush=True)
    out["verdicts"] = verdicts
    out["decision"] = overall(verdicts)
    log(f"decision: {out['decision']}", flush=True)
    return out


def posthoc(log=print) -> dict:
    from xstage.sim import fit as calib_fit
    out = {}
    for grid in GRIDS:
        runs = runs_of(grid)
        if len(runs) < 2:
            continue
        spread = []
        for seed in SEEDS:
            held = held_pairs_of(runs["c"], seed)
            row = {"seed": seed}
            for name, pts in runs.items():
                per = pts[(pts["mode"] == "periodic").to_numpy() & heldout_mask(pts, held)]
                sp = per["T_iss_spread"].dropna().to_numpy(float)
                row[name] = {**_q(sp), "over_15": int((sp > LIMIT).sum())}
            spread.append(row)
            log(f"{grid} seed {seed} held-out trial spread median / p90 / > 15 %: " + "; ".join(
                f"{n} {row[n]['median']:.1%} / {row[n]['p90']:.1%} / {row[n]['over_15']} of {row[n]['n']}"
                for n in runs), flush=True)
        with tempfile.TemporaryDirectory() as d:
            refit(Path(d) / "o", records=EXTRA / f"h200-pcie-host-{grid}", split_args=(FRACTION, 0, "bracket"),
                  model="two-stage-lockq")
            plat = Platform.load(Path(d) / "o" / "platform.json")
        pairs = []
        for k, b in PAIRS_KiB[grid]:
            r = {"K": k, "B_KiB": b}
            for name, pts in runs.items():
                at = pts[(pts["mode"] == "periodic") & (pts["producers"] == k) & (pts["bytes_per_producer"] == b * KiB)
                         & pts["phase"].isin(("rate", "plateau"))]
                c = calib_fit.model_check(at, plat)
                for phase in ("rate", "plateau"):
                    one = (c["phase"] == phase).to_numpy()
                    r[f"{phase}_{name}_us"] = float(c["T_iss(us)"][one].median())
                    r[f"{phase}_{name}_lockq0_us"] = float(c["model_T_iss(us)"][one].median())
                    r[f"{phase}_{name}_spread"] = float(at["T_iss_spread"][one].median())
            pairs.append(r)
            log(f"{grid} ({k}, {b}): " + "; ".join(
                f"{ph} " + " / ".join(f"{n} {r[f'{ph}_{n}_us']:.2f} (lockq0 {r[f'{ph}_{n}_lockq0_us']:.2f}, spread "
                                      f"{r[f'{ph}_{n}_spread']:.2f})" for n in runs) for ph in ("rate", "plateau")),
                flush=True)
        out[grid] = {"trial_spread_heldout": spread, "pairs_lockq_seed0": pairs}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("score", "posthoc"))
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_knee18")
    if args.action == "posthoc":
        write_new(args.json, {"post_hoc": True, "note": "read after knee18's pre-registered score; decides nothing",
                              "provenance": provenance(), **posthoc()}, "calib_knee18")
        return 0
    out = score()
    write_new(args.json, {**out, "provenance": provenance()}, "calib_knee18")
    return 0


if __name__ == "__main__":
    sys.exit(main())
