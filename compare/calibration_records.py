"""Summaries of committed calibration records (``xstage results calibration``): per platform folder under
``data/calibration/`` (and ``data/calibration-extra/``), the fitted platform checked against its points
again (``sim.platform_fit``), with the copy-engine rate beside it, and the held-out validation.

Held-out figures (``heldout_*``, ``fit_*``): a folder whose points carry a ``split`` column (a sweep since
issue 15) was fitted on its ``fit`` points, so its own platform is checked on both sets. A folder without
one (older runs, fitted on every point) gets the default split (``split_pairs``, default fraction and
seed) computed here, and a platform refitted in memory on its ``fit`` points only is checked on both sets
(``split_source: computed``; ``heldout_platform`` says what that refit gave); the committed files are
never rewritten. The all-points keys (``median_rel_err_T_iss``, ...) stay the committed platform's. The held-out
pairs that miss (``heldout_misses``, ``heldout_n_miss_pairs``; ``sim.heldout_misses``) come from the same check as the
held-out figures, so a recorded split gives what ``xstage calibrate`` wrote in summary.json (records written before
the field get it here too).

Pre-registered figures (``preregistered_*``, session 7): a folder of the ``fresh`` or ``fresh3`` grid (no (K, B)
pair of the wide one) named ``<base>-fresh`` / ``<base>-fresh3`` whose ``<base>-wide-two-stage-gated`` folder exists
is also checked, on every point, against that folder's platform -- fitted on the wide records' fit half and
committed before the fresh run (``preregistered_platform`` names it; nothing of the fresh run fitted it).
"""

import json
from pathlib import Path

from xstage.errors import InputError
from xstage.records import load_records
from xstage.sim import fit as calib_fit
from xstage.sim.platform_fit import (DEFAULT_HELDOUT_FRACTION, DEFAULT_MODEL, DEFAULT_SPLIT_SEED, capacity_law_of,
                                     check_and_summarize, fit_split_platform, miss_summary, split_errors,
                                     split_pairs)
from xstage.units import KiB, MiB

ROOTS = ("calibration", "calibration-extra")


def _folders(data_dir) -> dict:
    """platform folder name -> folder, over the record roots (the first root wins a name); folders holding a
    platform.json and its points.parquet."""
    found = {}
    for root in ROOTS:
        base = Path(data_dir) / root
        if base.is_dir():
            for p in sorted(base.glob("*/platform.json")):
                if (p.parent / "points.parquet").is_file():   # a pre-registered platform alone is no record
                    found.setdefault(p.parent.name, p.parent)
    return found


def recorded_model(meta: dict | None) -> str:
    """The platform model a folder was fitted with (``xstage calibrate --model``; older records: v1)."""
    return str(((meta or {}).get("config") or {}).get("model", DEFAULT_MODEL))


def heldout_summary(points, platform, meta: dict | None = None) -> dict:
    """The held-out keys of one folder (see the module doc): for the model the folder was fitted with."""
    config = (meta or {}).get("config", {})
    if "split" in points:
        split = points["split"].astype(str)
        check = calib_fit.model_check(points, platform)
        out = split_errors(check, split, fraction=config.get("heldout_fraction"), seed=config.get("split_seed"))
        out.update(miss_summary(check, split, platform))
        out["split_source"] = "recorded"
        return out
    split = split_pairs(points, DEFAULT_HELDOUT_FRACTION, DEFAULT_SPLIT_SEED)
    refit, _ = fit_split_platform(points, split, name=platform.name, target=platform.target,
                                  sm_count=platform.sm_count, capacity_law=capacity_law_of(recorded_model(meta)))
    check = calib_fit.model_check(points, refit)
    out = split_errors(check, split, fraction=DEFAULT_HELDOUT_FRACTION, seed=DEFAULT_SPLIT_SEED)
    out.update(miss_summary(check, split, refit))
    kmax = max(k for k, _ in refit.capacity_points) if not refit.two_stage else refit.sm_count
    out["split_source"] = "computed"
    out["heldout_platform"] = {"R_GBps": refit.drain_rate_GBps, "T_iss0_us_at_32KiB": refit.issue_time0_us(kmax, 32 * KiB),
                               "Q_MiB": refit.capacity_bytes(kmax) / MiB, "t_fixed_us": refit.t_fixed_us,
                               "producer_issue_GBps": refit.producer_issue_GBps,
                               "note": "refitted in memory on the fit points of the computed split"}
    return out


PREREGISTERED_SUFFIX = ("-fresh", "-wide-two-stage-gated")   # fresh folder -> the folder whose platform it tests
PREREGISTERED_GRIDS = {"fresh": "-fresh", "fresh3": "-fresh3"}   # grid -> the folder-name suffix of its runs
PREREGISTERED_KEYS = ("median_rel_err_T_iss", "p90_rel_err_T_iss", "median_rel_err_period", "p90_rel_err_period",
                      "isolated_median_rel_err_T_iss", "isolated_p90_rel_err_T_iss", "n_points")


def preregistered_summary(name: str, points, meta: dict | None, folders: dict) -> dict:
    """The ``preregistered_*`` keys of a fresh-grid folder (see the module doc); {} for any other folder."""
    from xstage.sim.platform import Platform

    new = PREREGISTERED_SUFFIX[1]
    old = PREREGISTERED_GRIDS.get(((meta or {}).get("config") or {}).get("grid"))
    if old is None or not name.endswith(old):
        return {}
    source = name[: -len(old)] + new
    if source not in folders:
        return {}
    errs = calib_fit.error_summary(calib_fit.model_check(points, Platform.load(folders[source] / "platform.json")))
    out = {f"preregistered_{k}": errs[k] for k in PREREGISTERED_KEYS}
    out["preregistered_platform"] = f"{folders[source].parent.name}/{source}"
    return out


def summarize_results(data_dir, platform: str | None = None):
    """Summary of committed calibration records under ``data_dir/calibration*/<platform>/``."""
    from xstage.sim.platform import Platform

    folders = _folders(data_dir)
    root = Path(data_dir) / ROOTS[0]
    if platform is not None and platform not in folders:
        raise InputError("--platform", platform, f"has no calibration records under {root} "
                         f"(found: {', '.join(folders) or 'none'})")
    if not folders:
        raise InputError("data", str(root), "holds no calibration records (run `xstage calibrate`)")
    rows = []
    for name in ([platform] if platform else list(folders)):
        folder = folders[name]
        plat = Platform.load(folder / "platform.json")
        points, meta = load_records(folder / "points.parquet", "point")
        check, summary = check_and_summarize(points, plat)
        if (folder / "copy.parquet").exists():
            copy, _ = load_records(folder / "copy.parquet", "kernel")
            summary["copy_engine_GBps"] = float(copy["copy(GBps)"].max())
        elif (folder / "summary.json").exists():   # a wheel ships no calibration-extra copy.parquet (pyproject.toml)
            recorded = json.loads((folder / "summary.json").read_text()).get("copy_engine_GBps")
            if recorded is not None:
                summary["copy_engine_GBps"] = float(recorded)
        summary.update(heldout_summary(points, plat, meta))
        summary.update(preregistered_summary(name, points, meta, folders))
        summary["model"] = recorded_model(meta)
        summary["records"] = f"{folder.parent.name}/{folder.name}"
        rows.append(summary)
    return rows[0] if platform else rows
