"""issue18 (session 18, POST HOC on committed knee grids): the issue law from one ``two-stage-lockq`` fit of knee10's
five committed broad host grids, held fixed; the capacity, the drain and every other parameter from the knee grid's
own ``bracket`` fit half through the product's refit. Scored by the rule in
data/calibration-extra/issue18-criterion.md (written before any fit).

    python benchmarks/calib_issue18.py --json OUT     # 1 pooled fit + 6 folders x 5 seeds = 30 refits; ~10 min

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

FITTERS = {"calib_fit": "fit_issue_time0", "fit_two_stage": "fit_issue_time0_overlap"}
LAW_KEYS = ("t_fixed_us", "producer_issue_GBps", "injection_GBps", "start_skew_us", "store_buffer_bytes")


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_issue18")
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
