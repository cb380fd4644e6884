"""Where committed records live.

``$XSTAGE_DATA`` if set; else the checkout's ``data/`` folder (a source tree or an editable install);
else the records shipped inside the installed package (``xstage/data``, from a wheel: ``pip install .``).
"""

import os
import tempfile
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


def output_folder(path, *, field: str = "--out", overwrite: bool = False, holds=()) -> Path:
    """``path`` as an output folder, checked before any long work and without creating anything: not a file,
    without any of the files ``holds`` unless ``overwrite``, and writable (itself, or the nearest folder above
    it that exists; a temporary probe file is made and removed there). Bad → ``InputError``."""
    from xstage.errors import InputError

    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InputError(field, str(out), "is a file, not a folder")
    clash = [name for name in holds if (out / name).exists()]
    if clash and not overwrite:
        raise InputError(field, str(out), f"already holds {', '.join(clash)} (pass --overwrite to replace them)")
    writable_folder(field, out, out)
    return out


def writable_folder(field: str, path, start) -> Path:
    """The nearest folder at or above ``start`` that exists, where ``path`` would be created: it must be a
    folder and writable (a temporary probe file is made and removed there). Bad → ``InputError`` on ``path``.
    The one such walk, for ``output_folder`` and the CLI's ``check_output``."""
    from xstage.errors import InputError

    probe = Path(start)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise InputError(field, str(path), f"cannot be created ({probe} is not a folder)")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as err:
        raise InputError(field, str(path), f"is not writable ({probe}: {err.strerror or type(err).__name__})") from None
    return probe
