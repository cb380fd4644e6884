"""Progress lines of the GPU runs (tuning, checks, per-configuration times) go to the ``xstage.hw`` logger.

``hw/`` never prints: the command line (``xstage.cli.exits.call``, ``xstage.cli.bench_args.guard``) points the
logger at stderr, and ``--quiet`` raises its level, so a library user sees nothing unless they ask.
"""

import logging

LOGGER = logging.getLogger("xstage.hw")


def hw_log(*parts) -> None:
    """One progress line, the parts joined by spaces (as ``print`` would)."""
    LOGGER.info(" ".join(str(p) for p in parts))
