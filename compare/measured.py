"""The measured side of the dashboard pages: every record a page overlays, read once from a records folder.

    calibration/<platform>/points.parquet  calibration points (``xstage calibrate``): the measured side
                                           of the calibration page (aggregate T_iss and period)
    calibration/<platform>/*.parquet       else burst records (e.g. ``xstage sim bursts --out``)
    any kernel records, experiment "attention" / "moe"
    any tile records (hw per-tile instrumentation), experiment "moe" / "attention"
    any summary records holding a MoE sweep (columns config, wave_us, int_us, speedup)

Nothing here simulates: ``Measured`` holds frames and the platforms they name.
"""

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from xstage.compare.bursts import load_calibration_points
from xstage.compare.frames import load_kind
from xstage.compare.platforms import find_platform
from xstage.errors import InputError
from xstage.records.spelling import json_key
from xstage.sim.platform import Platform, bundled_platforms


def default_platforms(data_dir: Path) -> list[str]:
    """Bundled platforms (paper-b200 first) plus any calibrated under ``data_dir/calibration``."""
    names = bundled_platforms()
    calib = Path(data_dir) / "calibration"
    if calib.is_dir():
        names += [p.parent.name for p in sorted(calib.glob("*/platform.json")) if p.parent.name not in names]
    return sorted(names, key=lambda n: (n != "paper-b200", n))


def burst_records(data_dir: Path, platform: str) -> pd.DataFrame:
    """Measured burst records of ``platform``: its calibration folder's, else any naming it."""
    frame = load_kind(Path(data_dir) / "calibration" / platform, "burst")
    if frame.empty:
        frame = load_kind(data_dir, "burst", where=lambda f, m: (f["platform"] == platform).all())
    return frame[frame["source"] != "sim"] if len(frame) else frame


def calibration_points(data_dir: Path, platform: str) -> pd.DataFrame | None:
    """``calibration/<platform>/points.parquet`` when it exists and holds calibration points, else None."""
    path = Path(data_dir) / "calibration" / platform / "points.parquet"
    if not path.is_file():
        return None
    try:
        frame = load_calibration_points(path)
    except InputError:
        return None
    return frame if len(frame) else None


def moe_sweep_records(data_dir: Path, platform: str) -> pd.DataFrame:
    """``xstage sweep moe --out`` files (summary records, table moe_sweep) of ``platform`` (named in their
    meta config), with the sweep's JSON-keyed column names (``wave(us)`` in the file, ``wave_us`` here).
    Version 1 sweep files named no table and are not read."""

    def mine(frame, meta):
        if meta.get("table") != "moe_sweep":
            return False
        plat = meta.get("platform")        # a name (calibration points) or a platform dict
        named = (meta.get("config") or {}).get("platform") or (plat.get("name") if isinstance(plat, dict) else plat)
        return named in (None, platform)

    frame = load_kind(data_dir, "summary", where=mine).rename(columns=json_key)
    return frame.drop_duplicates("config", keep="last") if len(frame) else frame


def _measured(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["source"] != "sim"] if len(frame) else frame


def _of(frame: pd.DataFrame, experiment: str) -> pd.DataFrame:
    return frame[frame["experiment"] == experiment] if len(frame) else frame


@dataclass
class Measured:
    """The records folder's measured tiles and kernels, split by experiment, and the platforms to use."""
    data_dir: Path
    platforms: dict            # name -> Platform, in page order (the first simulates the shared pages)
    tiles: pd.DataFrame        # hardware tile records (every experiment)
    kernels: pd.DataFrame      # hardware kernel records (every experiment)

    @property
    def primary(self) -> Platform:
        return next(iter(self.platforms.values()))

    def platform(self, name: str) -> Platform:
        return find_platform(name, self.data_dir)

    def moe_tiles(self) -> pd.DataFrame:
        return _of(self.tiles, "moe")

    def attention_tiles(self) -> pd.DataFrame:
        return _of(self.tiles, "attention")

    def moe_kernels(self) -> pd.DataFrame:
        return _of(self.kernels, "moe")

    def attention_kernels(self) -> pd.DataFrame:
        return _of(self.kernels, "attention")


def load_measured(data_dir: Path, platforms=None) -> Measured:
    """Read every measured tile and kernel record under ``data_dir``; resolve ``platforms`` (default: bundled
    and calibrated)."""
    data_dir = Path(data_dir)
    names = list(platforms or default_platforms(data_dir))
    if not names:
        raise InputError("platforms", names, "must name at least one platform")
    plats = {n: find_platform(n, data_dir) for n in names}
    return Measured(data_dir, plats, _measured(load_kind(data_dir, "tile")), _measured(load_kind(data_dir, "kernel")))
