"""Platform files: a ``xstage.sim.platform.Platform`` written as JSON (temp file + rename).

``sim/`` is pure, so the writing lives here; reading stays with ``Platform.load`` / ``load_platform``.
A one-stage platform is written as schema version 1, exactly as before; a two-stage one as version 2.
"""

from pathlib import Path

from xstage.records import atomic_write_text


def save_platform(platform, path, *, overwrite: bool = False) -> Path:
    """Write ``platform`` to ``path``; refuses an existing file unless ``overwrite``."""
    return atomic_write_text(path, platform.to_json(), overwrite=overwrite)
