"""How a record column spells its unit: ``name(unit)`` (``gap(us)``, ``volume(bytes)``, ``kernel(GBps)``).

One rule for every column of every record file, declared or added by an experiment:

- a quantity with a unit puts the unit token in parentheses after its name: ``name(unit)``; the
  tokens are ``UNITS`` (``us``, ``s``, ``bytes``, ``MiB``, ``GBps``, ``TFLOPs``);
- a label, an index, a count or a ratio carries no unit (``variant``, ``sm``, ``trials``,
  ``rel_err_T_iss``); a quantity named by what it counts keeps that noun first (``bytes_remote``,
  ``bytes_per_producer``, ``flops``);
- never ``name_unit`` and never a bare unit as the name (``T_iss_us``, ``GBps``): those are the
  spelling of JSON keys and Python identifiers, which keep ``name_unit`` (``T_iss_us``, ``fa_us``).

``json_key`` and ``column_name`` turn one spelling into the other (same name, same token), for the
few frames that are both a JSON result and a record (``xstage sweep --out``). Files of schema version
2 and earlier spelt about half their columns ``name_unit``; ``upgrade`` renames those columns on load
(``RENAMED``: the columns whose new name is not the mechanical one), so committed files keep loading
with the names written now.
"""

import re

import pandas as pd

from xstage.errors import InputError

UNITS = ("us", "s", "bytes", "MiB", "GBps", "TFLOPs")

_PAREN = re.compile(r"^(?P<name>.+)\((?P<unit>[^()]+)\)$")
_SUFFIX = re.compile(r"^(?P<name>.+?)_(?P<unit>us|s|bytes|MiB|GBps|TFLOPs)$")

# schema version 2 -> 3 renames that are not ``column_name``'s mechanical ``x_unit`` -> ``x(unit)``
RENAMED = {
    "kernel": {"TFLOPs": "compute(TFLOPs)",   # every timed row with FLOPs: FLOPs / median time
               "GBps": "copy(GBps)",          # copy.parquet: the copy engine's device-to-host rate ...
               "bytes": "volume(bytes)",      # ... and the volume it copied
               "GB_per_s": "copy(GBps)"},     # FlashAttention-4 runs: the copy-engine A2A's rate
}


def misspelt(name: str) -> str | None:
    """Why ``name`` breaks the column spelling rule (None when it follows it)."""
    m = _PAREN.match(name)
    if m:
        return None if m["unit"] in UNITS else f"has unit {m['unit']!r}, not one of {list(UNITS)}"
    if name in UNITS or name.endswith("_per_s") or _SUFFIX.match(name):
        return "spells its unit the JSON-key way; a record column is name(unit)"
    return None


def follows_rule(name: str, unit: str) -> bool:
    """Whether a declared (name, unit) pair follows the rule: ``name(unit)`` for a unit in ``UNITS``
    (or the unit as the leading noun: ``bytes_remote``); no unit spelt at all otherwise."""
    if misspelt(name):
        return False
    m = _PAREN.match(name)
    if unit in UNITS:
        return (m is not None and m["unit"] == unit) or name.startswith(f"{unit}_")
    return m is None


def column_name(key: str) -> str:
    """The record column for a JSON key or identifier: ``T_iss_us`` -> ``T_iss(us)`` (others unchanged)."""
    m = _SUFFIX.match(key)
    return f"{m['name']}({m['unit']})" if m else key


def json_key(column: str) -> str:
    """The JSON key for a record column: ``T_iss(us)`` -> ``T_iss_us`` (others unchanged)."""
    m = _PAREN.match(column)
    return f"{m['name']}_{m['unit']}" if m and m["unit"] in UNITS else column


def check_spelling(columns, where: str = "records") -> None:
    """Raise InputError naming ``where`` and the first column that breaks the rule."""
    for name in map(str, columns):
        why = misspelt(name)
        if why:
            fix = column_name(name)
            raise InputError(f"{where}: column", name, why + (f" (write {fix!r})" if fix != name else ""))


def upgrade(frame: pd.DataFrame, kind: str, version: int, where: str = "records") -> pd.DataFrame:
    """The columns of a schema version <= 2 file of ``kind`` under the names written now."""
    if version >= 3:
        return frame
    explicit = RENAMED.get(kind, {})
    renames = {c: explicit.get(c, column_name(c)) for c in frame.columns}
    renames = {old: new for old, new in renames.items() if old != new}
    targets = list(renames.values())
    clash = [new for new in targets if new in frame.columns or targets.count(new) > 1]
    if clash:
        old = sorted(o for o, n in renames.items() if n == clash[0])
        raise InputError(f"{where}: columns", old + ([clash[0]] if clash[0] in frame.columns else []),
                         f"all map to {clash[0]!r} in schema version 3; keep one")
    return frame.rename(columns=renames)
