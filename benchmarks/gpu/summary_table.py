"""Side by side, the figures of a few summary JSON files (the GPU scripts' short tables).

    python benchmarks/gpu/summary_table.py [--width 14] [--label-width 32] NAME=FILE ... -- KEY ...

One column per NAME (a file that is missing or not JSON counts as empty), one row per KEY: numbers as
``%.4g``, anything else (missing: None) as text.
"""

import argparse
import json
import sys
from pathlib import Path


def load(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except Exception:  # noqa: BLE001 - a failed step leaves no (or a broken) file: an empty column
        return {}


def cell(value, width: int) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:{width}.4g}"
    return f"{str(value):>{width}}"


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=14)
    ap.add_argument("--label-width", type=int, default=32)
    ap.add_argument("columns", nargs="+", help="NAME=FILE ... (then --, then KEY ...)")
    args, keys = ap.parse_args(argv[:cut]), argv[cut + 1:]
    cols = {name: load(path) for name, path in (c.split("=", 1) for c in args.columns)}
    print(f"{'':{args.label_width}}" + "".join(f"{name:>{args.width}}" for name in cols))
    for key in keys:
        print(f"{key:{args.label_width}}" + "".join(cell(col.get(key), args.width) for col in cols.values()))


if __name__ == "__main__":
    main()
