"""The one way a platform is found by name: bundled, a .json file, or calibrated under a records folder.

    find_platform("paper-b200")                         # bundled
    find_platform("h200-pcie-host", data_dir)           # data_dir/calibration/h200-pcie-host/platform.json
    find_platform("mine", search=[run_dir.parent])      # also any platform.json named "mine" under those folders
    locate_platform("h200-pcie-host")                   # (Platform, where it was found)

Order: a bundled name or a path (``*.json`` or holding ``/``); then the fitted
``calibration/<name>/platform.json`` under ``data_dir`` (default: the checkout's ``data/`` or
``$XSTAGE_DATA``); then every ``calib*/**/platform.json`` under the ``search`` folders whose platform
carries that name (a calibration written by the same run). Nothing found: ``InputError``.
"""

from pathlib import Path

from xstage.errors import InputError
from xstage.sim.platform import Platform, bundled_platforms, load_platform


def locate_platform(name: str, data_dir=None, *, search=()) -> tuple[Platform, str]:
    """(Platform, where it was found: ``bundled NAME`` or the file's path)."""
    from xstage.paths import data_dir as default_data_dir

    name = str(name)
    if name in bundled_platforms():
        return load_platform(name), f"bundled {name}"
    if name.endswith(".json") or "/" in name:
        return load_platform(name), name
    fitted = Path(data_dir or default_data_dir()) / "calibration" / name / "platform.json"
    if fitted.is_file():
        return load_platform(fitted), str(fitted)
    for folder in search:
        for path in sorted(Path(folder).glob("calib*/**/platform.json")):
            plat = Platform.load(path)
            if plat.name == name:
                return plat, str(path)
    raise InputError("platform", name, "is neither bundled nor calibrated under data/calibration/ "
                     "(pass --platform NAME or FILE.json)")


def find_platform(name: str, data_dir=None, *, search=()) -> Platform:
    """The platform ``name`` (see ``locate_platform``)."""
    return locate_platform(name, data_dir, search=search)[0]
