"""Writing a calibration's files together (``staged_files``): into a hidden folder inside OUT first, then moved in
only once every file is written, so a stop or an error while writing leaves OUT as it was. Moved out of
``calibrate.py`` (session 19), with the clean-up of folders a killed process left (``stale_stages``)."""

import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path

from xstage.errors import InputError

STAGE_PREFIX = ".finish-"


def stale_stages(out: Path) -> list[Path]:
    """``staged_files`` folders in ``out`` left by a process of this host that no longer runs (named
    ``.finish-<host>-<pid>-*``). Another host's folders, and those of processes still running, are not stale."""
    host, stale = socket.gethostname(), []
    for folder in Path(out).glob(f"{STAGE_PREFIX}*"):
        owner, sep, rest = folder.name[len(STAGE_PREFIX):].rpartition("-")[0].rpartition("-")
        if not (sep and owner == host and rest.isdigit() and folder.is_dir()):
            continue
        try:
            os.kill(int(rest), 0)
        except ProcessLookupError:
            stale.append(folder)
        except OSError:
            pass          # alive, owned by another user
    return sorted(stale)


@contextlib.contextmanager
def staged_files(out: Path, overwrite: bool):
    """A hidden folder inside ``out`` to write a calibration's files into; when the block ends without an error,
    each file is moved into ``out`` (an existing one only with ``overwrite``: checked for every file before any is
    moved). An error or an interrupt inside the block leaves ``out`` as it was: no mix of old and new files.
    The folder is named for this host and process; one left by a killed process of this host (SIGKILL leaves it)
    is removed first (``stale_stages``)."""
    for old in stale_stages(out):
        shutil.rmtree(old, ignore_errors=True)
    stage = Path(tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{socket.gethostname()}-{os.getpid()}-", dir=out))
    try:
        yield stage
        files = sorted(stage.iterdir())
        taken = [out / f.name for f in files if (out / f.name).exists()]
        if taken and not overwrite:
            raise InputError("output", str(taken[0]), "already exists (pass --overwrite to replace it)")
        for f in files:
            os.replace(f, out / f.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
