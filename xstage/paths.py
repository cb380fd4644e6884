"""Where committed records live.

``$XSTAGE_DATA`` if set; else the checkout's ``data/`` folder (a source tree or an editable install);
else the records shipped inside the installed package (``xstage/data``, from a wheel: ``pip install .``).
"""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def checkout_data() -> Path | None:
    """The checkout's data/ folder, when this package runs from a source tree."""
    if (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "data").is_dir():
        return REPO_ROOT / "data"
    return None


def packaged_data() -> Path | None:
    """The records shipped with an installed wheel (``xstage/data`` beside this module), when there are any."""
    folder = Path(__file__).resolve().parent / "data"
    return folder if folder.is_dir() and any(folder.iterdir()) else None


def data_dir() -> Path:
    env = os.environ.get("XSTAGE_DATA")
    if env:
        return Path(env)
    return checkout_data() or packaged_data() or REPO_ROOT / "data"
