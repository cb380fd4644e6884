"""``xstage trace RECORDS --out trace.json``: Chrome trace-event JSON of tile or burst records.

Open the file in https://ui.perfetto.dev (or chrome://tracing): one process per SM (tile records)
or producer (burst records), tracks for mainloop, MMA stall, store issue and the X-Stage's
issue-rate counters (see ``xstage.trace`` for the layout). ``--select KEY=VALUE`` keeps the rows
whose column KEY equals VALUE (repeatable), e.g. one configuration and schedule of a large file.
"""

import json
from pathlib import Path

from xstage.errors import InputError


def register(sub):
    p = sub.add_parser("trace", help="write tile or burst records as a Perfetto / Chrome trace (JSON)",
                       description="Write tile or burst records (measured or simulated) as Chrome trace-event "
                                   "JSON that Perfetto opens: one process per SM or producer.")
    p.add_argument("records", metavar="RECORDS", help="a tile or burst record file (.parquet or .csv)")
    p.add_argument("--out", required=True, help="trace file to write (.json)")
    p.add_argument("--select", action="append", default=[], metavar="KEY=VALUE",
                   help="keep rows whose column KEY equals VALUE (repeatable)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def select(frame, pairs):
    """Rows of ``frame`` matching every KEY=VALUE in ``pairs`` (compared as text)."""
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError("--select", pair, "must be KEY=VALUE")
        if key not in frame.columns:
            raise InputError("--select", pair, f"names no column (columns: {', '.join(map(str, frame.columns))})")
        keep = frame[key].astype(str) == value
        if not keep.any():
            seen = sorted(map(str, frame[key].astype(str).unique()))
            shown = ", ".join(seen[:8]) + (", ..." if len(seen) > 8 else "")
            raise InputError("--select", pair, f"matches no row ({key} values: {shown})")
        frame = frame[keep]
    return frame


def run(args) -> int:
    from xstage.cli import print_json, print_table
    from xstage.records import atomic_write_text, load_records
    from xstage.trace import trace

    out = Path(args.out)
    if out.suffix != ".json":
        raise InputError("--out", str(out), "must end in .json")
    if out.exists() and not args.overwrite:
        raise InputError("--out", str(out), "already exists (pass --overwrite to replace it)")
    frame, meta = load_records(args.records)
    if meta["kind"] not in ("tile", "burst"):
        raise InputError(f"{args.records}: kind", meta["kind"], "must be tile or burst for xstage trace")
    frame = select(frame, args.select)
    doc = trace(frame, meta["kind"], meta, where=str(args.records))
    text = json.dumps(doc, allow_nan=False, separators=(",", ":"))
    atomic_write_text(out, text, overwrite=args.overwrite)
    summary = {"out": str(out), "kind": meta["kind"], "rows": doc["otherData"]["rows"],
               "runs": doc["otherData"]["runs"], "events": len(doc["traceEvents"]), "bytes": len(text)}
    if args.json:
        print_json(summary)
    else:
        print_table(summary)
    return 0
