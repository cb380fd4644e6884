"""The committed host grid ``fresh10`` and one own-fit refit of it, as the knee studies' record tests recompute a row."""

from xstage.paths import data_dir
from xstage.records import load_records
from xstage.sim.platform_fit import capacity_law_of, check_and_summarize, fit_platform

FRESH10 = data_dir() / "calibration-extra" / "h200-pcie-host-fresh10"


def fresh10_points():
    """fresh10's calibration points, index reset (its ``split`` column is the recorded split)."""
    points, _ = load_records(FRESH10 / "points.parquet", "point")
    return points.reset_index(drop=True)


def own_fit_p90(points, split, model: str) -> float:
    """The held-out lockstep T_iss p90 of ``model`` fitted on the ``fit`` half of ``split`` (a Series or array)."""
    fit_half = points[split.to_numpy() == "fit"] if hasattr(split, "to_numpy") else points[split == "fit"]
    platform, _ = fit_platform(fit_half, name="refit", target="pcie-host", sm_count=132,
                               capacity_law=capacity_law_of(model))
    return check_and_summarize(points, platform, split)[1]["heldout_p90_rel_err_T_iss"]
