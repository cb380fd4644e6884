"""Where committed records live: ``$XSTAGE_DATA`` if set, else the checkout's ``data/`` folder."""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir() -> Path:
    env = os.environ.get("XSTAGE_DATA")
    return Path(env) if env else REPO_ROOT / "data"
