"""Summaries of committed calibration records (``xstage results calibration``): per platform folder under
``data/calibration/``, the fitted platform checked against its points again (``sim.platform_fit``), with
the copy-engine rate beside it.
"""

from pathlib import Path

from xstage.errors import InputError
from xstage.records import load_records
from xstage.sim.platform_fit import check_and_summarize


def summarize_results(data_dir, platform: str | None = None):
    """Summary of committed calibration records under ``data_dir/calibration/<platform>/``."""
    from xstage.sim.platform import Platform

    root = Path(data_dir) / "calibration"
    found = sorted(p.parent.name for p in root.glob("*/platform.json")) if root.is_dir() else []
    if platform is not None and platform not in found:
        raise InputError("--platform", platform, f"has no calibration records under {root} "
                         f"(found: {', '.join(found) or 'none'})")
    if not found:
        raise InputError("data", str(root), "holds no calibration records (run `xstage calibrate`)")
    rows = []
    for name in ([platform] if platform else found):
        plat = Platform.load(root / name / "platform.json")
        points, _ = load_records(root / name / "points.parquet", "point")
        check, summary = check_and_summarize(points, plat)
        if (root / name / "copy.parquet").exists():
            copy, _ = load_records(root / name / "copy.parquet", "kernel")
            summary["copy_engine_GBps"] = float(copy["GBps"].max())
        rows.append(summary)
    return rows[0] if platform else rows
