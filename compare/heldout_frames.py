"""The held-out validation of every committed calibration with a recorded split, as frames for the dashboard's
held-out page (``xstage.dashboards.page_heldout``) and ``xstage report``.

For each calibration folder (``calibration_records._folders``: ``data/calibration/`` then ``calibration-extra/``)
whose points carry a ``split`` column, the folder's own platform is checked again on every point
(``sim.fit.model_check``), as ``xstage results calibration`` does. Two frames come out:

- ``pairs``: one row per lockstep periodic (K, B) pair of the folder: whether the pair was fitted or held out, the
  median relative error of T_iss over the pair's points, how many points, and the pair's knee ratio
  (``sim.heldout_misses.knee_ratio``: (V - R T_iss0)/Q(K), near 1 at the capacity knee) under the folder's platform;
- ``folders``: one row per folder: target, model, grid, the held-out T_iss and period median / p90, and how many
  held-out lockstep pairs miss (a point off by more than 15 %) of those checked -- the figures of
  ``xstage results calibration``.

Folders without a recorded split (older runs) are left out here: their held-out figures come from a split computed
and refitted in memory, which ``xstage results calibration`` reports.
"""

from pathlib import Path

import numpy as np
import pandas as pd

from xstage.compare.calibration_records import _folders, recorded_model
from xstage.records import load_records
from xstage.sim import fit as calib_fit
from xstage.sim.heldout_misses import MISS_LIMIT, knee_ratio, periodic_pairs
from xstage.sim.platform_fit import miss_summary, split_errors

FOLDER_KEYS = ("heldout_meets_targets", "heldout_median_rel_err_T_iss", "heldout_p90_rel_err_T_iss", "heldout_median_rel_err_period",
               "heldout_p90_rel_err_period", "heldout_n_pairs", "heldout_n_checked_pairs", "heldout_n_miss_pairs")


def folder_pairs(points: pd.DataFrame, platform) -> tuple[pd.DataFrame, dict]:
    """One folder with a recorded split: (its lockstep periodic pairs, its held-out figures)."""
    split = points["split"].astype(str)
    check = calib_fit.model_check(points, platform)
    figures = split_errors(check, split)
    figures.update(miss_summary(check, split, platform))
    rows = [{"producers": k, "bytes_per_producer": b, "KiB": b / 1024,
             "split": "heldout" if (g["split"] == "heldout").any() else "fit",
             "median_rel_err_T_iss": float(np.median(e)), "n_points": int(e.size),
             "n_off": int((np.abs(e) > MISS_LIMIT).sum()), "knee_ratio": knee_ratio(platform, k, b)}
            for k, b, g, e in periodic_pairs(check, split, heldout_only=False)]
    return pd.DataFrame(rows), figures


def heldout_frames(data_dir) -> dict:
    """``{"pairs": ..., "folders": ...}`` over every folder of ``data_dir`` with a recorded split (module doc);
    both empty where there is none."""
    from xstage.sim.platform import Platform

    pairs, folders = [], []
    for name, folder in _folders(Path(data_dir)).items():
        points, meta = load_records(folder / "points.parquet", "point")
        if "split" not in points:
            continue
        platform = Platform.load(folder / "platform.json")
        frame, figures = folder_pairs(points, platform)
        config = (meta or {}).get("config") or {}
        records = f"{folder.parent.name}/{name}"
        pairs.append(frame.assign(folder=name, target=platform.target))
        folders.append({"folder": name, "records": records, "target": platform.target,
                        "model": recorded_model(meta), "grid": config.get("grid", "default"),
                        **{k: figures.get(k) for k in FOLDER_KEYS}})
    pair_cols = ["folder", "target", "producers", "bytes_per_producer", "KiB", "split", "median_rel_err_T_iss",
                 "n_points", "n_off", "knee_ratio"]
    return {"pairs": pd.concat(pairs, ignore_index=True)[pair_cols] if pairs else pd.DataFrame(columns=pair_cols),
            "folders": pd.DataFrame(folders, columns=["folder", "records", "target", "model", "grid", *FOLDER_KEYS])}
