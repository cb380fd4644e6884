"""issue18 (session 18, POST HOC on committed knee grids): the issue law from one ``two-stage-lockq`` fit of knee10's
five committed broad host grids, held fixed; the capacity, the drain and every other parameter from the knee grid's
own ``bracket`` fit half through the product's refit. Scored by the rule in
data/calibration-extra/issue18-criterion.md (written before any fit).

    python benchmarks/calib_issue18.py --json OUT               # 1 broad fit + 6 folders x 5 seeds = 30 refits; ~2 min
    python benchmarks/calib_issue18.py --insample --json OUT    # POST HOC, read after the score; decides nothing

``--insample``: the upper bound of any own fit of this law class. Each knee folder fitted on **every** one of its
points (its own issue law, and with the broad grids' issue law held fixed), judged on each ``bracket`` seed's
held-out half: where even that misses, no fit half of the folder can pass with this law.

The issue law is what ``platform_fit``'s two issue-law fitters (``calib_fit.fit_issue_time0``,
``fit_two_stage.fit_issue_time0_overlap``) returned last in the broad-grid fit (checked equal to that fit's T_iss0);
inside ``fixed_issue_law`` both return it, so the product's refit fits everything else around it. No (K, B) pair of
the broad grids is a pair of any knee folder (``shared_pairs``, checked before scoring), so the one fit serves
every folder and split.
"""
import argparse
import contextlib
import copy
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_b0wide import MODEL  # noqa: E402
from calib_fresh11 import FIGS, SEEDS, SEEDS_NEEDED, one  # noqa: E402
from calib_knee10 import fit_model, refuse_existing, write_new  # noqa: E402
from calib_pool18 import EXTRA, FOLDERS, POOL, folder_of  # noqa: E402
from xstage.hw.calib.calibrate import check_pool, pooled_rows  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim import platform_fit  # noqa: E402
from xstage.sim.platform_fit import LAW_KEYS  # noqa: E402

FITTERS = {"calib_fit": "fit_issue_time0", "fit_two_stage": "fit_issue_time0_overlap"}


class _Stand:
    """A module stand-in: ``name`` either records what it returns (``fixed`` None) or returns a copy of ``fixed``
    whatever it is given; every other attribute is the module's."""

    def __init__(self, module, name: str, fixed=None):
        self._module, self._name, self._fixed, self.last = module, name, fixed, None

    def __getattr__(self, attr):
        fn = getattr(self._module, attr)
        if attr != self._name:
            return fn

        def fitter(*args, **kw):
            if self._fixed is not None:
                return copy.deepcopy(self._fixed)
            self.last = fn(*args, **kw)
            return copy.deepcopy(self.last)
        return fitter


@contextlib.contextmanager
def stands(fixed=None):
    """Inside: ``platform_fit``'s two issue-law fitters are stand-ins (recording, or returning ``fixed[module]``)."""
    saved = {m: getattr(platform_fit, m) for m in FITTERS}
    made = {m: _Stand(saved[m], FITTERS[m], None if fixed is None else fixed[m]) for m in FITTERS}
    for m, s in made.items():
        setattr(platform_fit, m, s)
    try:
        yield made
    finally:
        for m, s in saved.items():
            setattr(platform_fit, m, s)


def broad_issue_law(pool=POOL) -> dict:
    """One ``two-stage-lockq`` fit on the broad grids' fit halves (as ``--pool`` supplies them): the two fitters'
    last returns (module -> dict), checked equal to that fit's T_iss0 on the law's terms."""
    rows, _ = pooled_rows(check_pool(pool, "host"), set())
    with stands() as made:
        _, fit = fit_model(rows, MODEL, "issue18-broad")
    law = {m: s.last for m, s in made.items()}
    for k in LAW_KEYS:
        assert law["fit_two_stage"].get(k) == fit["T_iss0"].get(k), k
    return law


def shared_pairs(pool=POOL) -> dict:
    """Per knee folder: the (K, B) pairs it shares with the broad grids (none, for the committed records)."""
    from xstage.records import load_records

    def pairs(folder):
        p, _ = load_records(folder / "points.parquet", "point")
        return set(zip(p["producers"].astype(int), p["bytes_per_producer"].astype(int)))
    broad = set().union(*(pairs(f) for f in pool))
    return {g: sorted(pairs(EXTRA / f"h200-pcie-host-{runs[0]}") & broad) for g, runs in FOLDERS.items()}


def decide(rows) -> dict:
    met = {g: sum(r["all_four"] for r in rows if r["grid"] == g) for g in FOLDERS}
    return {"rule": "data/calibration-extra/issue18-criterion.md", "seeds_met": met,
            "ready": all(n >= SEEDS_NEEDED for n in met.values())}


def insample(log=print) -> list:
    """Per knee folder and issue law (``own``, ``broad``): one fit on every point, judged on seeds 0-4's held-out
    halves under ``bracket`` (``calib_knee14.judge``, the scorer of the product's figures)."""
    from calib_fresh11 import FRACTION
    from calib_knee14 import judge
    from xstage.records import load_records
    from xstage.sim.split_sweeps import split_by_rule
    law, rows = broad_issue_law(), []
    with tempfile.TemporaryDirectory() as d:
        for grid in FOLDERS:
            points, _ = load_records(folder_of(grid, Path(d)) / "points.parquet", "point")
            points = points.reset_index(drop=True)
            for issue in ("own", "broad"):
                with stands(law) if issue == "broad" else contextlib.nullcontext():
                    plat, _ = fit_model(points.drop(columns=["split"], errors="ignore"), MODEL, f"insample-{grid}")
                for seed in SEEDS:
                    j = judge(plat, points, split_by_rule(points, "bracket", FRACTION, seed))
                    r = {"grid": grid, "issue_law": issue, "seed": seed, "fitted_on": "every point",
                         **{f"heldout_{k}": j[f"heldout_{k}"] for k in FIGS}, "misses": j["misses"],
                         "store_buffer_bytes": plat.store_buffer_bytes}
                    r["all_four"] = all(r[f"heldout_{k}"] <= (0.05 if k.startswith("median") else 0.15) for k in FIGS)
                    rows.append(r)
                    log(f"insample {grid:10s} {issue:5s} seed {seed} T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
                        f"{r['heldout_p90_rel_err_T_iss']:.1%} {'met' if r['all_four'] else 'not met'} "
                        f"misses {r['misses']}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--insample", action="store_true", help="POST HOC: fitted on every point (decides nothing)")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_issue18")
    if args.insample:
        rows = insample()
        met = {f"{g} {i}": sum(r["all_four"] for r in rows if (r["grid"], r["issue_law"]) == (g, i))
               for g in FOLDERS for i in ("own", "broad")}
        print(met)
        write_new(args.json, {"post_hoc": True, "note": "fitted on every point of each knee folder, read after the "
                              "score; decides nothing", "seeds_met": met, "rows": rows, "provenance": provenance()},
                  "calib_issue18")
        return 0
    shared = shared_pairs()
    assert not any(shared.values()), shared
    law = broad_issue_law()
    terms = {k: law["fit_two_stage"].get(k) for k in LAW_KEYS}
    print("issue law from the broad grids:", terms, flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for grid in FOLDERS:
            folder = folder_of(grid, Path(d))
            for seed in SEEDS:
                with stands(law):
                    r = one("host", MODEL, "bracket", seed, records=folder)
                rows.append({"grid": grid, "candidate": "issue18", **{k: r[k] for k in r if k != "target"}})
                print(f"{grid:10s} issue18 seed {seed} T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
                      f"{r['heldout_p90_rel_err_T_iss']:.1%} period {r['heldout_median_rel_err_period']:.1%} "
                      f"/ {r['heldout_p90_rel_err_period']:.1%} {'met' if r['all_four'] else 'not met'} "
                      f"misses {r['misses']}", flush=True)
    decision = decide(rows)
    print(decision)
    write_new(args.json, {"post_hoc": True, "figures": list(FIGS), "pool": [str(p.relative_to(EXTRA.parents[1]))
                                                                             for p in POOL],
                          "issue_law": terms, "shared_pairs": shared, "decision": decision, "rows": rows,
                          "provenance": provenance()}, "calib_issue18")
    return 0


if __name__ == "__main__":
    sys.exit(main())
