"""Sizes with units: ``32KiB``, ``4.25MiB``, ``4.6MB``; a bare number is bytes.

``K``, ``M``, ``G`` (and ``KiB``, ``MiB``, ``GiB``) are powers of 1024; ``KB``, ``MB``, ``GB`` are powers of
1000. A size must come to a whole number of bytes, at least one.
"""

import math
import re

from xstage.errors import InputError

_FACTORS = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3,
    "k": 1024, "m": 1024**2, "g": 1024**3,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_LIMIT = 2**62  # bytes: anything larger is a typo, and would overflow int64 columns

KiB = 1024
MiB = 1024**2


def parse_size(text, field: str = "size") -> int:
    """Parse a byte size. Units: B, KB/MB/GB (powers of 1000), KiB/MiB/GiB and K/M/G (powers of 1024).

    >>> parse_size("32KiB")
    32768
    """
    if isinstance(text, bool) or text is None:
        raise InputError(field, text, "must be a size such as 32KiB, 4.25MiB or a byte count")
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        m = _SIZE.match(str(text))
        if not m:
            raise InputError(field, text, "must be a size such as 32KiB, 4.25MiB or a byte count")
        value, unit = float(m.group(1)), m.group(2)
    factor = _FACTORS.get(unit.lower())
    if factor is None:
        raise InputError(field, text, "has an unknown unit (use B, KB, MB, GB, KiB, MiB, GiB)")
    nbytes = value * factor
    if not math.isfinite(nbytes) or nbytes > _LIMIT:
        raise InputError(field, text, f"must be at most {_LIMIT} bytes")
    if nbytes <= 0:
        raise InputError(field, text, "must be > 0")
    whole = round(nbytes)
    if whole < 1 or abs(nbytes - whole) > 1e-6 * max(1.0, nbytes):
        raise InputError(field, text, "must be a whole number of bytes (>= 1)")
    return int(whole)


def format_size(nbytes: float) -> str:
    """Human-readable binary size, e.g. ``4.25MiB``."""
    for unit, factor in (("GiB", 1024**3), ("MiB", MiB), ("KiB", KiB)):
        if abs(nbytes) >= factor:
            return f"{nbytes / factor:.4g}{unit}"
    return f"{nbytes:.0f}B"
