"""``xstage calibrate --against PLATFORM``: a committed platform on calibration points it never saw
(``xstage.sim.carried``), nothing fitted.

    xstage calibrate --against data/calibration-extra/h100-local/platform.json \
        --records data/calibration-extra/h100-local-r3          # card 1's local platform on a third card's run
    xstage calibrate --target host --grid fresh5 --model two-stage-gated2 --out DIR \
        --against h200-pcie-host                                 # calibrate this card, and score the bundled one
    xstage calibrate --against data/calibration-extra/h100-pcie-host-pool24/platform.json --own-rate \
        --records data/calibration-extra/h100-pcie-host-fresh11-c27    # and again with the card's own R

With ``--records`` nothing is measured or written; after a sweep or a refit the scores are printed (and put in the
--json summary under ``against``) after the run's own summary, and the files written are the run's alone.
``--own-rate`` adds, after each platform's row, the same platform with the folder's own drain rate R
(``carried.with_drain_rate``): everything but R carried. ``--own-rate`` / ``--own-rate median`` (call28's rule,
pre-registered in session 28): on a host folder, the median V / period of its zero-gap lockstep points, which one slow
point cannot pull (call27c's fresh13: 52.735 GB/s where the least-squares fit gave 52.256); off host, and where a
folder has no such point, the fitted R. ``--own-rate fit``: the R the run fitted (its platform.json; session 27).
"""

from pathlib import Path

from xstage.cli.calib import OWN_RATES, miss_table
from xstage.cli.common import print_json
from xstage.errors import InputError


def _platform(name: str):
    from xstage.compare.platforms import locate_platform
    try:
        return locate_platform(name)
    except InputError as err:
        raise InputError("--against", name, "is neither a bundled platform, a calibrated one under data/calibration/, "
                         "nor a platform.json") from err
    except (OSError, ValueError, KeyError) as err:
        raise InputError("--against", name, f"could not be read as a platform ({type(err).__name__}: {err})") from err


def _points(folder):
    from xstage.records import load_records
    src = Path(folder)
    if not str(folder).strip() or not (src / "points.parquet").is_file():
        raise InputError("--records", str(folder), "holds no points.parquet (a calibration folder)")
    return load_records(src / "points.parquet", "point")


def _gpu(meta_or_notes: dict) -> str | None:
    return ((meta_or_notes or {}).get("provenance") or {}).get("gpu", {}).get("gpu_uuid")


def _own_rate(folder) -> float:
    """The drain rate R (GB/s) the calibration folder ``folder`` fitted (its platform.json)."""
    from xstage.sim.platform import load_platform
    src = Path(folder) / "platform.json"
    if not src.is_file():
        raise InputError("--own-rate", str(folder), "holds no platform.json (the run's fitted drain rate)")
    try:
        return float(load_platform(src).drain_rate_GBps)
    except (OSError, ValueError, KeyError) as err:
        raise InputError("--own-rate", str(src), f"could not be read as a platform ({type(err).__name__}: "
                         f"{err})") from err


RATE_CHECK = 0.005   # the fitted R against the median rate of the zero-gap lockstep points (host: 54 folders <= 0.29 %)


def rate_check(points, rate_GBps: float, target: str | None) -> dict | None:
    """On a host folder, the median V/period of its zero-gap lockstep points beside the fitted R: a least-squares R
    pulled by one slow point (call27c's fresh13: 52.26 GB/s fitted, 52.73 median, every other host folder within
    0.29 %) moves every drain-held prediction. None off host (local's zero-gap points are not drain-held)."""
    if target != "host":
        return None
    spin = points["gap_kind"] == "spin" if "gap_kind" in points else True
    zero = points[(points["mode"] == "periodic") & (points["gap(us)"] == 0) & spin]
    if zero.empty:
        return None
    median = float((zero["volume(bytes)"] / zero["period(us)"]).median()) / 1e3
    off = rate_GBps / median - 1.0
    return {"median_zero_gap_rate_GBps": median, "fitted_vs_median": off, "suspect": abs(off) > RATE_CHECK}


FIT_OFF_HOST = "fit (no zero-gap host median)"   # the rule a row names where --own-rate median falls back to the fit


def scores(names, folder, own_rate: str | None = None) -> list[dict]:
    """``carried`` of each platform named in ``names`` on the points of calibration folder ``folder``, with where
    the platform was found, the folder, both targets and both GPUs (uuids where recorded). ``own_rate`` ("median" or
    "fit", ``OWN_RATES``): after each platform, the same platform with the folder's own R (``drain_rate_from`` names
    where R came from, ``drain_rate_rule`` the rule that gave it)."""
    from xstage.sim.carried import carried, with_drain_rate
    if own_rate not in (None, *OWN_RATES):
        raise InputError("--own-rate", own_rate, f"is not one of {', '.join(OWN_RATES)}")
    points, meta = _points(folder)
    target = (meta.get("config") or {}).get("target")
    rate = _own_rate(folder) if own_rate else None
    check = rate_check(points, rate, target) if rate is not None else None
    rule, source = own_rate, str(Path(folder) / "platform.json")
    if own_rate == "median":
        if check is None:     # off host, or no zero-gap lockstep point: the fitted R, and the row says so
            rule = FIT_OFF_HOST
        else:
            rate, source = check["median_zero_gap_rate_GBps"], str(Path(folder) / "points.parquet")
    out = []
    for name in names:
        platform, where = _platform(name)
        if target and platform.target and platform.target != target:
            raise InputError("--against", name, f"is a {platform.target} platform; the records in {folder} are "
                             f"{target} points")
        row = {"platform_file": str(where), "records": str(folder), "target": target,
               "platform_gpu": _gpu(platform.notes), "records_gpu": _gpu(meta),
               "platform_pooled": bool((platform.notes or {}).get("pool")),
               "platform_R_GBps": platform.drain_rate_GBps, "drain_rate_GBps": platform.drain_rate_GBps,
               "drain_rate_from": "platform"}
        out.append({**row, **carried(points, platform)})
        if rate is not None:
            out.append({**row, "drain_rate_GBps": rate, "drain_rate_from": source, "drain_rate_rule": rule,
                        "rate_check": check, **carried(points, with_drain_rate(platform, rate))})
    return out


def _fig(f: dict) -> str:
    return (f"T_iss {f['median_rel_err_T_iss']:.2%} / {f['p90_rel_err_T_iss']:.2%}, period "
            f"{f['median_rel_err_period']:.2%} / {f['p90_rel_err_period']:.2%} (n {f['n_points']})")


RULE_WORDS = {"median": "the median of its zero-gap lockstep points", "fit": "its fitted R",
              FIT_OFF_HOST: "its fitted R (a median rate is read on host folders only)"}


def lines(rows: list[dict], limit: int = 8) -> list[str]:
    """The human block: per platform, the four checks on every lockstep point, the folder's held-out half, and the
    worst ``limit`` pairs with a point off by more than 15 %."""
    from xstage.sim.heldout_misses import MISS_LIMIT, verdict
    out = []
    for r in rows:
        card = ("GPU not recorded" if not (r["platform_gpu"] and r["records_gpu"]) else
                "the same GPU" if r["platform_gpu"] == r["records_gpu"] else
                f"another GPU ({r['records_gpu'][:12]}; the platform's: {r['platform_gpu'][:12]}"
                + (", pooled over several runs" if r["platform_pooled"] else "") + ")")
        rate = ("" if r["drain_rate_from"] == "platform" else f" with the run's own R {r['drain_rate_GBps']:.3f} "
                f"GB/s, {RULE_WORDS[r['drain_rate_rule']]} (the platform's "
                f"{r['platform_R_GBps']:.3f})")
        out.append(f"against {r['platform']}{rate} ({r['platform_file']}) on {r['records']}: {card}")
        check = r.get("rate_check")
        if check and check["suspect"]:
            tail = ("this row uses the median" if r["drain_rate_rule"] == "median" else
                    "the fit was pulled by a few points; read this row with care (--own-rate median uses the median)")
            out.append(f"  warning: the run's fitted R is {check['fitted_vs_median']:+.2%} from the median rate of its "
                       f"zero-gap lockstep points ({check['median_zero_gap_rate_GBps']:.3f} GB/s): {tail}")
        if r["meets"] is None:
            out.append("  no lockstep periodic point: nothing to score")
            continue
        every = {f"heldout_{k}": v for k, v in r["every_point"].items()}   # the keys verdict reads
        out.append("  " + verdict(every, label=f"every lockstep point: {_fig(r['every_point'])}"))
        if r.get("heldout_half"):
            out.append(f"  the folder's held-out half: {_fig(r['heldout_half'])}")
        misses = r["misses"]
        out.append(f"  pairs with a point off by > {MISS_LIMIT:.0%}: {len(misses) or 'none'} of {r['n_pairs']} "
                   "lockstep pairs" + (f" (the worst {limit}; --json lists all)" if len(misses) > limit else ""))
        if misses:
            out += miss_table(misses[:limit], indent="    ")
    return out


def run_records(args) -> int:
    """``--against`` with ``--records`` and no ``--refit``: score, print, write nothing."""
    for field in ("out", "target", "sim"):
        if getattr(args, field, None) is not None:
            raise InputError(f"--{field}", getattr(args, field), "does not go with --against --records (nothing is "
                             "measured or written; drop --records to score the run a sweep measures)")
    rows = scores(args.against, args.records, own_rate=args.own_rate)
    if args.json:
        print_json(rows)
    else:
        print("\n".join(lines(rows)))
    return 0
