"""The host knee placed per K from the lockstep sweeps themselves (``--model two-stage-kneek``; issue 15, session 12,
knee13) against ``two-stage-gated2`` and ``two-stage-state`` on the committed host grids. POST HOC: every grid here,
fresh10 included, was read before (docs/calibration/knee10.md, knee11.md, knee12.md); these figures decide only
whether a fresh grid is measured, by the rule committed before them (data/calibration-extra/knee13-criterion.md).

    python benchmarks/calib_knee13.py score  --json OUT   # own fit half, 7 grids (fresh10 seeds 0-4), 3 models; ~15 min
    python benchmarks/calib_knee13.py reads  --json OUT   # each own fit's per-K knee reads, held-out pairs' places
    python benchmarks/calib_knee13.py misses --json OUT   # each own fit's held-out pairs with a point > 15 %
    python benchmarks/calib_knee13.py variant  --json OUT  # variant L: the line clipped into each K's votes (post hoc)
    python benchmarks/calib_knee13.py insample --json OUT  # fitted on every fresh10 point: the form's upper bound
    python benchmarks/calib_knee13.py census --json OUT    # each own fit half's pairs by vote; who votes free
    python benchmarks/calib_knee13.py record --parts score.json reads.json ... --json OUT   # the record

``score``: ``calib_knee11.logo`` with ``fits=("own",)`` for each model, then the decision by the committed rule.
``reads``: for each own fit of ``RUNS`` (fresh10 seeds 0-4, the other grids' recorded splits), r(K) and how it was
read at each K (two-sided, above, below, none; the excesses where the votes switch), and every held-out lockstep
pair's place: its excess over r(K) Q(K) (the gate's ratio, > 1 caught) beside how its own points vote under the same fit (what the measurement says).
``misses``: per run of ``RUNS``, the held-out lockstep pairs with a point off by > 15 % under ``two-stage-kneek``.
``variant`` (L): after the ``two-stage-kneek`` fit, r(K) = 1 (the line) clipped into each K's own vote bounds, no
interpolation in K, rho re-chosen by the check; a post hoc variant, not a model, deciding nothing.
``insample``: ``two-stage-kneek`` fitted on every fresh10 point, scored on seeds 0-4's held-out halves.
Every action writes its JSON atomically (``.tmp`` then rename) and refuses to overwrite an existing file.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee10 import fit_halves, fit_model, grid_points, refuse_existing, split_of, write_new  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim import fit as calib_fit  # noqa: E402
from xstage.sim.fit_knee import KNEE_BELOW, knee_votes  # noqa: E402
from xstage.sim.heldout_misses import missed_pairs  # noqa: E402

MODELS = ("two-stage-gated2", "two-stage-state", "two-stage-kneek")
NEW = "two-stage-kneek"
SEEDS = (0, 1, 2, 3, 4)
OTHERS = ("wide", "fresh", "fresh2", "fresh3", "fresh5", "wide-3525cba")
TARGET, SLACK = 0.15, 0.005
RULE = ("qualifies for one pre-registered fresh host + local grid only if (1) fresh10 own-fit held-out lockstep T_iss "
        "p90 <= 0.15 at >= 4 of the 5 seeds (0 recorded, 1-4 split_pairs 0.3) and (2) on each of wide, fresh, fresh2, "
        "fresh3, fresh5, wide-3525cba (recorded splits) two-stage-kneek's own-fit held-out T_iss p90 <= max(0.15, "
        "two-stage-gated2's own p90 + 0.005); written and committed before any score "
        "(data/calibration-extra/knee13-criterion.md)")


RUNS = tuple(("fresh10", s) for s in SEEDS) + tuple((g, 0) for g in OTHERS)   # (grid, seed): 0 is the recorded split


def _split(points, seed):
    return split_of(points, "recorded" if seed == 0 else "pairs", seed)


def _fit(frame, model=NEW):
    return fit_model(frame, model, "knee13")


def decide(rows) -> dict:
    """The committed rule on ``score``'s rows (``calib_knee11.logo`` rows: model, grid, split, fit, figures)."""
    p90 = {(r["model"], r["grid"], r["split"]): r["heldout_p90_rel_err_T_iss"] for r in rows if r["fit"] == "own"}
    fresh10 = [p90[(NEW, "fresh10", s)] for s in ["recorded"] + [f"pairs seed {s}" for s in SEEDS[1:]]]
    met = sum(v <= TARGET for v in fresh10)
    others = {}
    for g in OTHERS:
        new, ref = p90[(NEW, g, "recorded")], p90[("two-stage-gated2", g, "recorded")]
        limit = max(TARGET, ref + SLACK)
        others[g] = {"kneek_p90": new, "gated2_p90": ref, "limit": limit, "held": bool(new <= limit)}
    qualified = met >= 4 and all(o["held"] for o in others.values())
    return {"rule": RULE, "fresh10_own_p90_by_seed": fresh10, "fresh10_own_seeds_met": met, "others": others,
            "qualified": qualified}


def score(json_path=None, log=print) -> dict:
    from calib_knee11 import logo
    out = logo(MODELS, "host", json_path=None, log=log, fits=("own",))
    out["decision"] = decide(out["rows"])
    log(json.dumps(out["decision"], indent=1))
    return out


def _vote_of(points, plat, k, b):
    rows = points[(points["producers"] == k) & (points["bytes_per_producer"] == b)]
    v = knee_votes(rows, plat)
    return v[0]["caught"] if v else None


def reads(log=print) -> list:
    out = []
    for grid, seed in RUNS:
        pts = grid_points("host", grid)
        split = _split(pts, seed)
        plat, fit = _fit(fit_halves([(grid, pts, split)]))
        R = plat.drain_rate_Bpus
        held = []
        per = pts[(pts["mode"] == "periodic") & (split.to_numpy() == "heldout")]
        for (k, b), _ in per.groupby(["producers", "bytes_per_producer"]):
            k, b = int(k), int(b)
            excess = k * b - R * plat.issue_time0_us(k, b)
            held.append({"K": k, "B_KiB": b / 1024, "gate_ratio": excess / plat.lockstep_knee_bytes(k),
                         "line_ratio": excess / plat.capacity_bytes(k), "model": "caught" if excess >
                         plat.lockstep_knee_bytes(k) else "free",
                         "measured_vote": {True: "caught", False: "free", None: "none"}[_vote_of(pts, plat, k, b)]})
        per_k = [{k2: v for k2, v in r.items()} for r in fit["knee_reads"]["per_K"]]
        out.append({"grid": grid, "split": f"seed {seed}",
                    "ratio_points": [list(p) for p in plat.lockstep_knee_ratio_points],
                    "rho_GBps": plat.capacity_relax_GBps, "per_K": per_k, "heldout_pairs": held})
        log(f"reads {grid} seed {seed}: " + " ".join(f"K={r['K']} {r['read']} r={r['ratio']:.3f}" for r in per_k),
            flush=True)
        for h in held:
            log(f"    held-out ({h['K']}, {h['B_KiB']:g} KiB): gate ratio {h['gate_ratio']:.2f} (line "
                f"{h['line_ratio']:.2f}) -> {h['model']}; its points vote {h['measured_vote']}", flush=True)
    return out


def misses(log=print) -> list:
    out = []
    for grid, seed in RUNS:
        pts = grid_points("host", grid)
        split = _split(pts, seed)
        plat, _ = _fit(fit_halves([(grid, pts, split)]))
        R = plat.drain_rate_Bpus
        for k, b, g, e in missed_pairs(calib_fit.model_check(pts, plat), split):
            excess = k * b - R * float(g["T_iss0(us)"].iloc[0])
            out.append({"grid": grid, "seed": seed, "K": k, "B_KiB": b / 1024,
                        "gate_ratio": float(excess / plat.lockstep_knee_bytes(k)),
                        "points": int(len(e)), "over_15pct": int((np.abs(e) > 0.15).sum()),
                        "median_rel_err_T_iss": float(np.median(e)),
                        "measured_T_iss_median(us)": float(g["T_iss(us)"].median()),
                        "model_T_iss_median(us)": float(g["model_T_iss(us)"].median())})
            r = out[-1]
            log(f"misses {grid} seed {seed} ({k}, {b // 1024} KiB) gate ratio {r['gate_ratio']:.2f}: median "
                f"{r['median_rel_err_T_iss']:+.0%}, {r['over_15pct']} of {r['points']} > 15 %", flush=True)
    return out


def line_clipped(per_k) -> tuple:
    """Variant L (post hoc, not a model): at each K the line (r = 1) moved only as far as that K's votes demand --
    clipped into [e_below, e_above) / Q(K) -- with no interpolation between Ks."""
    out = []
    for r in per_k:
        lo = r.get("e_below_bytes") or 0.0
        hi = r.get("e_above_bytes")
        ratio = max(1.0, lo / r["Q_bytes"]) if r["read"] != "none" else 1.0
        if hi is not None:
            ratio = min(ratio, KNEE_BELOW * hi / r["Q_bytes"])
        out.append((r["K"], float(ratio)))
    return tuple(out)


def variant(log=print) -> list:
    from dataclasses import replace
    from calib_knee10 import score_on
    from xstage.sim import fit_two_stage
    from xstage.sim.fit_two_stage import check_loss
    out = []
    for grid, seed in RUNS:
        pts = grid_points("host", grid)
        split = _split(pts, seed)
        half = fit_halves([(grid, pts, split)])
        plat, fit = _fit(half)
        cur = replace(plat, lockstep_knee_ratio_points=line_clipped(fit["knee_reads"]["per_K"]))
        rho = fit_two_stage.fit_relax_rate(lambda r: check_loss(half, cur, r), plat.drain_rate_Bpus)["rho_Bpus"]
        cur = replace(cur, capacity_relax_GBps=rho / 1e3)
        r = {"variant": "L: the line clipped into each K's votes", "grid": grid, "split": f"seed {seed}",
             **score_on(cur, pts, split), "ratio_points": [list(p) for p in cur.lockstep_knee_ratio_points],
             "rho_GBps": cur.capacity_relax_GBps}
        out.append(r)
        log(f"variant L {grid:12s} seed {seed}: held-out T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
            f"{r['heldout_p90_rel_err_T_iss']:.1%}  r " + " ".join(f"{k}:{v:.2f}" for k, v in r["ratio_points"]),
            flush=True)
    return out


def insample(log=print) -> list:
    from calib_knee10 import score_on
    pts = grid_points("host", "fresh10")
    plat, _ = _fit(pts)
    out = []
    for seed in SEEDS:
        r = {"fit": "every fresh10 point", "split": f"seed {seed}", **score_on(plat, pts, _split(pts, seed)),
             "ratio_points": [list(p) for p in plat.lockstep_knee_ratio_points]}
        out.append(r)
        log(f"insample seed {seed}: held-out T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
            f"{r['heldout_p90_rel_err_T_iss']:.1%}", flush=True)
    return out


def census(log=print) -> list:
    """Per own-fit run: the fit half's lockstep pairs by vote (caught, free, none), and which phases the free
    voters hold (a pair with a gap sweep, ``gap`` or ``fma`` points, or rate / plateau only)."""
    out = []
    for grid, seed in RUNS:
        pts = grid_points("host", grid)
        split = _split(pts, seed)
        half = fit_halves([(grid, pts, split)])
        plat, fit = _fit(half)
        votes = fit["knee_reads"]["votes"]
        per = half[half["mode"] == "periodic"]
        swept = {(int(k), int(b)) for k, b, ph in zip(per["producers"], per["bytes_per_producer"], per["phase"])
                 if ph in ("gap", "fma")}
        free = [(v["K"], v["B"]) for v in votes if v["caught"] is False]
        r = {"grid": grid, "split": f"seed {seed}", "pairs": len(votes),
             "caught": sum(v["caught"] is True for v in votes), "free": len(free),
             "none": sum(v["caught"] is None for v in votes), "free_with_gap_sweep": sum(p in swept for p in free),
             "free_pairs": [[k, b / 1024] for k, b in free], "pairs_with_gap_sweep": len(swept)}
        out.append(r)
        log(f"census {grid:12s} seed {seed}: {r['pairs']} pairs, caught {r['caught']}, free {r['free']} "
            f"({r['free_with_gap_sweep']} with a gap sweep; {r['pairs_with_gap_sweep']} swept pairs), none {r['none']}",
            flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("score", "reads", "misses", "variant", "insample",
                                           "census", "record"))
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--parts", type=Path, nargs="*", default=(), help="record: the score, reads and misses JSONs")
    args = ap.parse_args(argv)
    path = args.json
    refuse_existing(path, "calib_knee13")
    if args.action == "record":
        parts = {json.loads(p.read_text())["action"]: json.loads(p.read_text()) for p in args.parts}
        score_part = parts["score"]["result"]
        rec = {"post_hoc": True, "note": __doc__.splitlines()[0], "provenance": provenance(),
               "decision": decide(score_part["rows"]), "logo_own": score_part,
               **{a: parts[a]["result"] for a in ("reads", "misses", "variant", "insample", "census")
                  if a in parts},
               "parts_provenance": {a: p["provenance"] for a, p in parts.items()}}
        rec["decision"]["device_call"] = None
        write_new(path, rec, "calib_knee13")
        return 0
    result = {"score": score, "reads": reads, "misses": misses, "variant": variant, "insample": insample,
              "census": census}[args.action]()
    write_new(path, {"post_hoc": True, "action": args.action, "provenance": provenance(), "result": result},
              "calib_knee13")
    return 0


if __name__ == "__main__":
    sys.exit(main())
