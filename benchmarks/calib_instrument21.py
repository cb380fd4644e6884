"""instrument21 (session 21, POST HOC, decides nothing): are combo18's held-out misses on fresh15 and fresh16 within
what the instrument itself reproduces? Read after both pre-registered scores (fresh15-scores.json: met, 4 of 5 seeds;
fresh16-scores.json: not met, 2 of 5); fresh14, the other ``--repeat 2`` folder, beside them for comparison.

    python benchmarks/calib_instrument21.py --json OUT    # 1 broad issue-law fit + 3 grids x 5 seeds combo18 refits

Each grid is one ``xstage calibrate --repeat 2`` folder: its points-runs.parquet holds the two runs the command
measured (``repeat`` 1 and 2, read by ``calib_fresh14.runs_of`` as r1 and r2), its points.parquet their point-wise
median, on which combo18 was fitted and judged. Per ``bracket`` seed s (``split_by_rule(median, "bracket", 0.3, s)``,
the score's split), on the held-out half's lockstep periodic points:

- **the instrument** (knee18's figure, ``calib_knee18.instrument_heldout``): one run as the prediction of the other,
  e = T_A / T_B - 1 for r1 -> r2 and r2 -> r1; median and p90 of |e| per ordered pair, the figure the median over
  the two pairs; its own pairs off by > 15 % (``instrument_misses``); and, secondary, each run as the prediction of
  the median (the truth the score judged against).
- **combo18**: refitted at s by calib_combo18's own functions (the broad issue law held by ``stands``, ``_fit_both``
  on the median's fit half, ``_row`` to judge), checked equal to the committed score's row (fresh15, fresh16) or the
  session-18 post hoc row (fresh14, combo18-posthoc.json) to 1e-9, misses included; of its held-out points off
  the median by > 15 % (``points_off``), how many it puts between the two runs and how many the runs themselves hold
  > 15 % apart; and, secondary, its |e| against each run alone.
- **per missed pair** (every held-out pair combo18 misses at some seed): at each of its lockstep periodic points the
  two runs' T_iss, the median's, and combo18's prediction at every seed that holds the pair out.

knee18's rule read on the instrument rows (``calib_knee18.verdict``): "beyond the instrument" iff the instrument's
held-out T_iss p90 > 0.15 at >= 2 of 5 seeds; "within the instrument" iff all four checks hold for it at >= 4 of 5;
else "at the edge". Here it is read after the scores, on runs of one call (knee18's came from separate calls), and
decides nothing. The JSON is written atomically and a file already there is never overwritten.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calib_combo18 as combo18  # noqa: E402
from calib_fresh11 import FIGS, FRACTION, SEEDS  # noqa: E402
from calib_fresh14 import runs_of  # noqa: E402
from calib_knee10 import refuse_existing, write_new  # noqa: E402
from calib_knee18 import (KEY, LIMIT, _q, heldout_mask, held_pairs_of, instrument_all_four,  # noqa: E402
                          instrument_heldout, matched, ordered_pairs, rel, verdict)
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim import fit as calib_fit  # noqa: E402
from xstage.sim.heldout_misses import MISS_LIMIT, missed_pairs  # noqa: E402
from xstage.sim.split_sweeps import split_by_rule  # noqa: E402

EXTRA = combo18.EXTRA
GRIDS = ("fresh14", "fresh15", "fresh16")
RUNS = ("r1", "r2")
SCORED = {"fresh15": "fresh15-scores.json", "fresh16": "fresh16-scores.json"}   # pre-registered; fresh14: post hoc


def folder(grid: str) -> Path:
    return EXTRA / f"h200-pcie-host-{grid}"


def grid_name(grid: str) -> str:
    """The name calib_combo18 gave the folder in its rows (the ``--records`` path, or the knee folder's name)."""
    return f"data/calibration-extra/h200-pcie-host-{grid}" if grid in SCORED else grid


def median_points(grid: str):
    points, _ = load_records(folder(grid) / "points.parquet", "point")
    return points.reset_index(drop=True)


def runs_with_median(grid: str) -> dict:
    """{"r1", "r2": each run's points (points-runs.parquet), "median": the folder's points.parquet}."""
    return {**runs_of(folder(grid)), "median": median_points(grid)}


def instrument_misses(sub, a: str, b: str, limit: float = LIMIT) -> list:
    """The held-out pairs of ``sub`` (matched rows) where run ``a`` predicting run ``b`` is off by > ``limit`` at a
    point: [K, B bytes, median e, points over, points], as calib_knee14.held_misses lists a model's (B in bytes, since
    these grids' B are quarter KiB)."""
    out = []
    e_all = rel(sub, a, b)
    for (k, bb), idx in sub.groupby(["producers", "bytes_per_producer"]).groups.items():
        e = e_all[sub.index.get_indexer(idx)]
        e = e[np.isfinite(e)]
        if e.size and (np.abs(e) > limit).any():
            out.append([int(k), int(bb), round(float(np.median(e)), 4), int((np.abs(e) > limit).sum()), int(e.size)])
    return out


def committed_row(grid: str, seed: int):
    """The row calib_combo18 recorded for combo18 at ``seed`` on ``grid`` (fresh15/16: the pre-registered score;
    fresh14: session 18's post hoc scan)."""
    path = EXTRA / SCORED.get(grid, "combo18-posthoc.json")
    for r in json.loads(path.read_text())["rows"]:
        if r["grid"] == grid_name(grid) and r["candidate"] == "combo18" and r["seed"] == seed:
            return r
    return None


def combo18_at(points, seed: int, grid: str, law) -> tuple:
    """combo18 refitted on the median's ``bracket`` fit half at ``seed`` as calib_combo18.scan does it: (its judged
    row, the model check of every point under it, the split in ``points``' order)."""
    split = split_by_rule(points, "bracket", FRACTION, seed)
    with combo18.stands(law):
        fitted = combo18._fit_both(points[split.to_numpy() == "fit"], points, grid_name(grid))
    plat = fitted[combo18.CANDIDATES["combo18"]]
    row = combo18._row("heldout", grid_name(grid), seed, "combo18", plat, points, split)
    return row, calib_fit.model_check(points, plat), split.reindex(points.index).to_numpy()


def with_model(m, points, check, seed: int):
    """``m`` (matched rows) with ``combo18_s<seed>``: the model's T_iss at each matched point."""
    p = points[points["mode"] == "periodic"].copy()
    p["step"] = p.groupby(KEY[:-1]).cumcount()
    p[f"combo18_s{seed}"] = check.loc[p.index, "model_T_iss(us)"].to_numpy(float)
    return m.merge(p[KEY + [f"combo18_s{seed}"]], on=KEY, how="left")


def points_off(sub, seed: int, limit: float = MISS_LIMIT) -> dict:
    """Of the held-out points (``sub``) where combo18 is off the median by > ``limit``: how many, how many with its
    prediction between the two runs' T_iss (inclusive), and how many where the runs themselves are > ``limit`` apart
    (either run as the prediction of the other)."""
    c = sub[f"combo18_s{seed}"].to_numpy(float)
    r1, r2, med = (sub[f"T_iss(us)_{n}"].to_numpy(float) for n in RUNS + ("median",))
    off = np.abs(c / med - 1) > limit
    between = (np.minimum(r1, r2) <= c) & (c <= np.maximum(r1, r2))
    apart = np.maximum(np.abs(r1 / r2 - 1), np.abs(r2 / r1 - 1)) > limit
    return {"n": int(off.sum()), "between_runs": int((off & between).sum()), "runs_apart": int((off & apart).sum())}


def pair_points(m, k: int, b: int, seeds) -> list:
    """The matched lockstep points of (k, b): each run's T_iss, the median's, combo18's prediction at ``seeds``."""
    at = m[(m["producers"] == k) & (m["bytes_per_producer"] == b)]
    rows = []
    for _, r in at.iterrows():
        row = {"phase": r["phase"], "step": int(r["step"]),
               **{f"T_iss_{n}_us": float(r[f"T_iss(us)_{n}"]) for n in RUNS + ("median",)}}
        row["e_r1_r2"] = row["T_iss_r1_us"] / row["T_iss_r2_us"] - 1
        row["e_r2_r1"] = row["T_iss_r2_us"] / row["T_iss_r1_us"] - 1
        row["combo18_us"] = {str(s): float(r[f"combo18_s{s}"]) for s in seeds}
        row["e_combo18"] = {str(s): float(r[f"combo18_s{s}"]) / row["T_iss_median_us"] - 1 for s in seeds}
        lo, hi = sorted((row["T_iss_r1_us"], row["T_iss_r2_us"]))
        row["combo18_between_runs"] = {str(s): bool(lo <= r[f"combo18_s{s}"] <= hi) for s in seeds}
        rows.append(row)
    return rows


def one_grid(grid: str, law, log=print) -> dict:
    runs = runs_with_median(grid)
    points = runs["median"]
    m = matched(runs)
    both = (m["T_iss(us)_r1"] > 0) & (m["T_iss(us)_r2"] > 0)
    mean = (m["T_iss(us)_r1"] + m["T_iss(us)_r2"]) / 2
    g = {"records": str(folder(grid).relative_to(EXTRA.parents[1])), "matched_points": int(len(m)),
         "median_is_mean_of_runs_max_abs_us": float((m["T_iss(us)_median"][both] - mean[both]).abs().max()),
         "scored_by": f"data/calibration-extra/{SCORED.get(grid, 'combo18-posthoc.json')}",
         "by_seed": [], "missed_pairs": []}
    held_by_seed, missed = {}, {}
    for seed in SEEDS:
        held = held_pairs_of(points, seed)
        for n in RUNS:
            assert held_pairs_of(runs[n], seed) == held, (grid, n, seed)
        held_by_seed[seed] = held
        mask = heldout_mask(m, held)
        inst = instrument_heldout(m, list(RUNS), mask)
        row, check, split = combo18_at(points, seed, grid, law)
        want = committed_row(grid, seed)
        assert want is not None and want["misses"] == row["misses"], (grid, seed, row["misses"])
        for k in FIGS:
            assert abs(row[f"heldout_{k}"] - want[f"heldout_{k}"]) < 1e-9, (grid, seed, k)
        m = with_model(m, points, check, seed)
        sub = m[mask]
        r = {"seed": seed, "n_points": int(mask.sum()),
             "instrument": {**{k: v for k, v in inst.items() if k != "by_pair"}, "all_four": instrument_all_four(inst),
                            "by_pair": inst["by_pair"],
                            "misses": {f"{a}->{b}": instrument_misses(sub, a, b) for a, b in ordered_pairs(RUNS)}},
             "run_vs_median": instrument_heldout(m, list(RUNS) + ["median"], mask, truth="median"),
             "combo18": {**{k: row[f"heldout_{k}"] for k in FIGS}, "all_four": row["all_four"],
                         "misses": row["misses"], "matches_committed": True}}
        r["combo18_points_off"] = points_off(sub, seed)
        pred = sub[f"combo18_s{seed}"].to_numpy(float)
        r["combo18_vs_each_run"] = {n: _q(pred / sub[f"T_iss(us)_{n}"].to_numpy(float) - 1) for n in RUNS}
        g["by_seed"].append(r)
        e = np.abs(sub[f"combo18_s{seed}"].to_numpy(float) / sub["T_iss(us)_median"].to_numpy(float) - 1)
        assert abs(float(np.percentile(e, 90)) - row["heldout_p90_rel_err_T_iss"]) < 1e-9, (grid, seed)
        pairs = [(k, b, e) for k, b, _, e in missed_pairs(check, split, MISS_LIMIT)]
        assert [[k, b // 1024, round(float(np.median(e)), 4), int((np.abs(e) > MISS_LIMIT).sum()), int(e.size)]
                for k, b, e in pairs] == row["misses"], (grid, seed)
        for k, b, _ in pairs:
            missed.setdefault((k, b), []).append(seed)
        i = r["instrument"]
        log(f"{grid} seed {seed} (n {r['n_points']}): instrument T_iss {i['median_T_iss']:.1%} / {i['p90_T_iss']:.1%} "
            f"period {i['median_period']:.1%} / {i['p90_period']:.1%}; combo18 "
            f"{row['heldout_median_rel_err_T_iss']:.1%} / {row['heldout_p90_rel_err_T_iss']:.1%} "
            f"{'met' if row['all_four'] else 'not met'}; its points off > 15 % {r['combo18_points_off']}; "
            f"instrument misses {i['misses']}", flush=True)
    for (k, b), seeds in sorted(missed.items()):
        held_at = [s for s in SEEDS if (k, b) in held_by_seed[s]]
        g["missed_pairs"].append({"K": k, "B_bytes": b, "B_KiB": b / 1024, "missed_at_seeds": seeds,
                                  "heldout_at_seeds": held_at, "points": pair_points(m, k, b, held_at)})
        for p in g["missed_pairs"][-1]["points"]:
            log(f"  ({k}, {b / 1024:g} KiB) {p['phase']:7s} step {p['step']}: r1 {p['T_iss_r1_us']:.3f} r2 "
                f"{p['T_iss_r2_us']:.3f} median {p['T_iss_median_us']:.3f} us; combo18 "
                + " ".join(f"s{s} {v:.3f}" for s, v in p["combo18_us"].items()), flush=True)
    g["verdict_knee18_terms"] = verdict([r["instrument"] for r in g["by_seed"]])
    g["instrument_seeds_p90_over_15"] = int(sum(r["instrument"]["p90_T_iss"] > LIMIT for r in g["by_seed"]))
    g["instrument_seeds_all_four"] = int(sum(r["instrument"]["all_four"] for r in g["by_seed"]))
    g["combo18_seeds_all_four"] = int(sum(r["combo18"]["all_four"] for r in g["by_seed"]))
    log(f"{grid}: {g['verdict_knee18_terms']} (instrument T_iss p90 > 15 % at {g['instrument_seeds_p90_over_15']} "
        f"of 5 seeds, all four at {g['instrument_seeds_all_four']}); combo18 all four at "
        f"{g['combo18_seeds_all_four']} of 5", flush=True)
    return g


def posthoc(grids=GRIDS, log=print) -> dict:
    law = combo18.broad_issue_law()
    return {grid: one_grid(grid, law, log) for grid in grids}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_instrument21")
    out = {"post_hoc": True,
           "note": ("read after fresh15's and fresh16's pre-registered scores; decides nothing. The instrument: "
                    "one run of a --repeat 2 call as the prediction of the other (knee18's figure); combo18 is judged "
                    "against the runs' median"),
           "split": f"split_by_rule(median points, 'bracket', {FRACTION}, seed), seeds {list(SEEDS)}",
           "grids": posthoc(), "provenance": provenance()}
    write_new(args.json, out, "calib_instrument21")
    return 0


if __name__ == "__main__":
    sys.exit(main())
