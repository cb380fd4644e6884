"""Find and load record files: every Parquet (or CSV + .meta.json) record file under a folder.

The kind of a Parquet file is read from its metadata block alone (no rows loaded), so scanning a
``data/`` folder is cheap. ``load_kind`` concatenates all files of one kind, optionally filtered.
"""

import json
from pathlib import Path

import pandas as pd

from xstage.errors import InputError
from xstage.records import META_KEY, load_records


def record_kind(path: Path) -> str | None:
    """The record kind stored in ``path``'s metadata, or None for a file that is not an xstage record
    (a Parquet file without the xstage block, a CSV without ``.meta.json``). A file that cannot be read
    (truncated, corrupt) is an ``InputError`` naming it: skipping it would pass for "no data yet"."""
    path = Path(path)
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            raw = (pq.read_schema(path).metadata or {}).get(META_KEY)
            kind = json.loads(raw).get("kind") if raw else None
        elif path.suffix == ".csv":
            meta = path.with_suffix(".meta.json")
            kind = json.loads(meta.read_text()).get("kind") if meta.exists() else None
        else:
            return None
    except (OSError, ValueError, AttributeError) as err:
        raise InputError("records", str(path), f"is not a readable record file ({type(err).__name__})") from None
    return kind if isinstance(kind, str) else None


def scan_records(folder) -> pd.DataFrame:
    """One row per record file under ``folder``: path, kind (non-records are skipped)."""
    folder = Path(folder)
    rows = []
    if folder.is_dir():
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".parquet", ".csv") and path.is_file():
                kind = record_kind(path)
                if kind:
                    rows.append({"path": str(path), "kind": kind, "folder": str(path.parent.relative_to(folder))})
    return pd.DataFrame(rows, columns=["path", "kind", "folder"])


def load_kind(folder, kind: str, where=None) -> pd.DataFrame:
    """All records of ``kind`` under ``folder`` concatenated; ``where(frame, meta) -> bool`` filters files.
    Each row gets ``record_file`` (the path relative to ``folder``). Empty frame when none."""
    frames = []
    listing = scan_records(folder)
    for path in listing.loc[listing["kind"] == kind, "path"]:
        frame, meta = load_records(path, kind)
        if where is None or where(frame, meta):
            frames.append(frame.assign(record_file=str(Path(path).relative_to(folder))))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_files(paths) -> dict:
    """Load the record files named on a command line, grouped by kind: {kind: frame}."""
    grouped = {}
    for path in paths:
        frame, meta = load_records(path)
        grouped.setdefault(meta["kind"], []).append(frame.assign(record_file=str(path)))
    if not grouped:
        raise InputError("RECORDS", list(paths), "must name at least one record file")
    return {kind: pd.concat(frames, ignore_index=True) for kind, frames in grouped.items()}
