"""Record files: one schema per kind of record, shared by the simulator and the hardware.

A record file is Parquet (or CSV for quick looks) holding the rows, with a JSON block in the
Parquet metadata (``META_KEY``; beside a CSV, ``NAME.meta.json``) that carries the record kind,
schema version, resolved configuration and provenance. Each kind is declared in its own module
(``burst``, ``point``, ``tile``, ``kernel``, ``summary``) as ``KIND`` and ``COLUMNS``: (name, unit)
pairs, the unit "" for labels, indices, counts and ratios. A summary file also names its table
(``summary.TABLES``). Every column, declared or added by an experiment, spells its unit ``name(unit)``
(``spelling``: ``gap(us)``, ``volume(bytes)``; JSON keys keep ``name_unit``).

``save_records`` and ``load_records`` check the declaration: the kind is the one the caller
names (never one carried in ``meta``), every declared column is present, every column with a
unit is numeric and every column follows the spelling (a summary ``frame`` holds a page's own
columns and is not checked). A bad file is one ``InputError`` naming the file and the field. Files are
written to a temporary name and renamed; an existing file is never overwritten unless asked.

Schema versions: 3 (written now) spells every column ``name(unit)``; 2 split calibration points
(kind ``point``) off ``summary`` and named a summary's table. Version 1 and 2 files are read with
their ``name_unit`` columns renamed to the version 3 names (``spelling.upgrade``: ``T_iss_us`` ->
``T_iss(us)``, ``kernel_GBps`` -> ``kernel(GBps)``, ...), and a reader asking for ``point`` accepts a
version 1 ``summary`` (that is how version 1 stored points).
"""

import json
import math
import os
import tempfile
from pathlib import Path

import pandas as pd

from xstage.errors import InputError
from xstage.records import burst, kernel, point, spelling, summary, tile

SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
META_KEY = b"xstage"

KINDS = {m.KIND: m for m in (burst, point, tile, kernel, summary)}
COLUMNS = {kind: [name for name, _ in m.COLUMNS] for kind, m in KINDS.items()}
TABLES = summary.TABLES


def declared_columns(kind: str, table: str | None = None) -> tuple:
    """(name, unit) pairs a record of ``kind`` (a summary: of ``table``) must carry."""
    if kind not in KINDS:
        raise InputError("record kind", kind, f"must be one of {sorted(KINDS)}")
    if kind != "summary" or table is None:
        return KINDS[kind].COLUMNS
    if table not in TABLES:
        raise InputError("summary table", table, f"must be one of {sorted(TABLES)}")
    return TABLES[table]


def check_columns(kind: str, frame: pd.DataFrame, *, table: str | None = None, where: str = "records") -> None:
    """Raise InputError naming ``where`` unless ``frame`` carries the declared columns of ``kind``."""
    declared = declared_columns(kind, table)
    label = f"{kind} ({table})" if table else kind
    missing = [name for name, _ in declared if name not in frame.columns]
    if missing:
        raise InputError(f"{where}: {label} columns", missing, "are missing")
    for name, unit in declared:
        col = frame[name]
        if unit and not pd.api.types.is_numeric_dtype(col) and not col.isna().all():
            raise InputError(f"{where}: column {name}", str(col.dtype), f"must be numeric (unit {unit})")
    if table != "frame":
        spelling.check_spelling(frame.columns, where)


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; records are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def json_safe(obj):
    """JSON-safe copy: NaN/inf to None, numpy scalars to Python, keys to str."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()
        except (ValueError, AttributeError, TypeError):
            pass
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def atomic_write_text(path, text: str, *, overwrite: bool = False) -> Path:
    path = Path(path)
    if path.exists() and not overwrite:
        raise InputError("output", str(path), "already exists (pass --overwrite to replace it)")
    _atomic_write(path, lambda tmp: Path(tmp).write_text(text))
    return path


def save_records(path, kind: str, frame: pd.DataFrame, meta: dict, *, table: str | None = None,
                 overwrite: bool = False) -> Path:
    """Write ``frame`` with ``meta`` (configuration, provenance) to ``path`` (.parquet or .csv).

    The file's kind is ``kind`` and its schema version ``SCHEMA_VERSION`` whatever ``meta`` carries
    (meta loaded from another record file holds that file's kind). A summary names its ``table``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if kind == "summary" and table is None:
        raise InputError(f"{path}: summary table", None, f"must be one of {sorted(TABLES)}")
    if kind != "summary" and table is not None:
        raise InputError(f"{path}: table", table, "applies to summary records only")
    check_columns(kind, frame, table=table, where=str(path))
    if path.exists() and not overwrite:
        raise InputError("output", str(path), "already exists (pass --overwrite to replace it)")
    block = {k: v for k, v in meta.items() if k != "table"}
    block.update({"kind": kind, "schema_version": SCHEMA_VERSION})
    if table is not None:
        block["table"] = table
    if path.suffix == ".csv":
        _atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))
        atomic_write_text(path.with_suffix(".meta.json"), json.dumps(block, indent=2, default=str),
                          overwrite=True)
        return path
    if path.suffix != ".parquet":
        raise InputError("output", str(path), "must end in .parquet or .csv")
    table_ = pa.Table.from_pandas(frame, preserve_index=False)
    existing = table_.schema.metadata or {}
    table_ = table_.replace_schema_metadata({**existing, META_KEY: json.dumps(block, default=str).encode()})
    # zstd: about 20 % smaller than the default snappy on these records (the tracked tree travels to the GPU
    # machine under a 64 MiB limit); level 9 keeps large tile logs quick to write
    _atomic_write(path, lambda tmp: pq.write_table(table_, tmp, compression="zstd", compression_level=9))
    return path


def read_meta(path) -> dict:
    """The metadata block of a record file, without loading its rows ({} when it has none)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise InputError("records", str(path), "does not exist")
    try:
        if path.suffix == ".csv":
            meta_path = path.with_suffix(".meta.json")
            return json.loads(meta_path.read_text()) if meta_path.exists() else {}
        raw = (pq.read_schema(path).metadata or {}).get(META_KEY)
        return json.loads(raw) if raw else {}
    except (pa.ArrowException, OSError, ValueError) as err:
        raise InputError("records", str(path), f"is not a readable record file ({type(err).__name__})") from None


def resolve_kind(meta: dict, kind: str | None, where: str = "records") -> str:
    """The kind a file declares in ``meta``, checked against the ``kind`` a caller asks for."""
    version = meta.get("schema_version")
    if version not in READABLE_VERSIONS:
        raise InputError(f"{where}: schema_version", version, f"must be one of {list(READABLE_VERSIONS)}")
    declared = meta.get("kind")
    if declared not in KINDS:
        raise InputError(f"{where}: kind", declared, f"must be one of {sorted(KINDS)}")
    if version == 1 and declared == "summary" and kind == "point":
        declared = "point"                     # version 1 stored calibration points as summaries
    if kind is not None and declared != kind:
        raise InputError(f"{where}: kind", declared, f"must be {kind!r} for this command")
    return declared


def load_records(path, kind: str | None = None, *, table: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Load a record file; check its kind (``kind``: the one the caller needs), schema version and
    declared columns, with a version 1 or 2 file's columns renamed to today's spelling. Returns (frame, meta); ``meta["kind"]`` is the kind the file declares (and, for
    a summary, ``meta["table"]`` its table, or the one asked for in a version 1 file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    meta = read_meta(path)
    if not meta:
        raise InputError("records", str(path), "has no xstage metadata block")
    found = resolve_kind(meta, kind, str(path))
    found_table = meta.get("table")
    if found == "summary":
        if table is not None and found_table is not None and found_table != table:
            raise InputError(f"{path}: table", found_table, f"must be {table!r} for this command")
        if found_table is None and meta.get("schema_version") != 1:
            raise InputError(f"{path}: table", None, f"must be one of {sorted(TABLES)}")
        found_table = found_table or table
    try:
        frame = pd.read_csv(path) if path.suffix == ".csv" else pq.read_table(path).to_pandas()
    except (pa.ArrowException, OSError, ValueError) as err:
        raise InputError("records", str(path), f"is not a readable record file ({type(err).__name__})") from None
    if found_table != "frame":      # a page's frame keeps the columns its page draws, in any version
        frame = spelling.upgrade(frame, found, meta["schema_version"], str(path))
    check_columns(found, frame, table=found_table if found == "summary" else None, where=str(path))
    meta = {**meta, "kind": found}
    if found == "summary":
        meta["table"] = found_table
    return frame, meta


def declares(path, kind: str) -> bool:
    """Whether the file at ``path`` declares ``kind`` (what ``load_records(path, kind)`` accepts as its
    kind); reads the metadata only."""
    try:
        resolve_kind(read_meta(path), kind, str(path))
    except InputError:
        return False
    return True
