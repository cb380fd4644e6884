"""Record files: one schema per kind of record, shared by the simulator and the hardware.

A record file is Parquet (or CSV for quick looks) holding the rows, with a JSON block in the
Parquet metadata that carries the record kind, schema version, resolved configuration and
provenance. Files are written to a temporary name and renamed; an existing file is never
overwritten unless asked.
"""

import json
import os
import tempfile
from pathlib import Path

import pandas as pd

from xstage.errors import InputError

SCHEMA_VERSION = 1
META_KEY = b"xstage"

COLUMNS = {
    "burst": ["source", "platform", "target", "mode", "producers", "bytes_per_producer", "gap(us)",
              "producer", "burst", "start(us)", "issue(us)", "period(us)"],
    "tile": ["source", "platform", "experiment", "config", "schedule", "sm", "seq", "kind", "expert", "m", "n",
             "bytes_remote", "mainloop_start(us)", "mainloop_end(us)", "issue_start(us)", "issue_end(us)",
             "mma_stall(us)"],
    "kernel": ["source", "experiment", "config", "variant", "time(us)", "trials"],
    "summary": [],
}


def check_columns(kind: str, frame: pd.DataFrame) -> None:
    if kind not in COLUMNS:
        raise InputError("record kind", kind, f"must be one of {sorted(COLUMNS)}")
    missing = [c for c in COLUMNS[kind] if c not in frame.columns]
    if missing:
        raise InputError(f"{kind} record columns", missing, "are missing")


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


def atomic_write_text(path, text: str, *, overwrite: bool = False) -> Path:
    path = Path(path)
    if path.exists() and not overwrite:
        raise InputError("output", str(path), "already exists (pass --overwrite to replace it)")
    _atomic_write(path, lambda tmp: Path(tmp).write_text(text))
    return path


def save_records(path, kind: str, frame: pd.DataFrame, meta: dict, *, overwrite: bool = False) -> Path:
    """Write ``frame`` with ``meta`` (configuration, provenance) to ``path`` (.parquet or .csv)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    check_columns(kind, frame)
    if path.exists() and not overwrite:
        raise InputError("output", str(path), "already exists (pass --overwrite to replace it)")
    block = {"kind": kind, "schema_version": SCHEMA_VERSION, **meta}
    if path.suffix == ".csv":
        _atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))
        atomic_write_text(path.with_suffix(".meta.json"), json.dumps(block, indent=2, default=str),
                          overwrite=True)
        return path
    if path.suffix != ".parquet":
        raise InputError("output", str(path), "must end in .parquet or .csv")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    existing = table.schema.metadata or {}
    table = table.replace_schema_metadata({**existing, META_KEY: json.dumps(block, default=str).encode()})
    _atomic_write(path, lambda tmp: pq.write_table(table, tmp))
    return path


def load_records(path, kind: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Load a record file; check its kind, schema version and columns. Returns (frame, meta)."""
    import pyarrow.parquet as pq
    import pyarrow as pa

    path = Path(path)
    if not path.exists():
        raise InputError("records", str(path), "does not exist")
    try:
        if path.suffix == ".csv":
            frame = pd.read_csv(path)
            meta_path = path.with_suffix(".meta.json")
            meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        else:
            table = pq.read_table(path)
            frame = table.to_pandas()
            raw = (table.schema.metadata or {}).get(META_KEY)
            meta = json.loads(raw) if raw else {}
    except (pa.ArrowException, OSError, ValueError, json.JSONDecodeError) as err:
        raise InputError("records", str(path), f"is not a readable record file ({type(err).__name__})") from None
    if not meta:
        raise InputError("records", str(path), "has no xstage metadata block")
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise InputError("records schema_version", meta.get("schema_version"), f"must be {SCHEMA_VERSION}")
    found = meta.get("kind")
    if kind is not None and found != kind:
        raise InputError("records kind", found, f"must be {kind!r} for this command")
    check_columns(found, frame)
    return frame, meta
