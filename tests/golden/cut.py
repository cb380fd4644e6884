"""Cut the golden slices: a few hundred rows of the committed measurements, for the compare tests.

    python tests/golden/cut.py                  # rewrite tests/golden/data/ from data/ (same rows every time)
    python tests/golden/cut.py --out DIR        # cut into another folder (the test checks it matches)

Each slice is a record file of the same kind as its source, with the source's metadata (config,
provenance) and a ``golden`` block naming the source file, its SHA-256 and the rule that picked the
rows; ``SOURCES.json`` lists them. Platform files are copied as they are. The rules keep the measured
quirks the compare layer has to handle: lockstep points whose measured gap includes the barrier wait,
free-running and isolated points, per-trial burst rows, tuning and option variants beside the chosen
attention kernel, local / pointer MoE variants, one row per rank in the W = 2 MoE runs.
"""

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import pandas as pd

from xstage.records import load_records, save_records

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "data"
MOE_CONFIGS = ("h2048-i4096-t8192-e8-balanced-bf16-w8-s0", "h2048-i4096-t8192-e8-skewed-bf16-w8-s0")
EP_CONFIGS = ("h2048-i4096-t8192-e8-balanced-bf16-ep2-s0", "h2048-i4096-t8192-e8-skewed-bf16-ep2-s0")


def points(frame: pd.DataFrame) -> pd.DataFrame:
    """Up to 6 points per (phase, mode), evenly spaced in the file's order."""
    keep = []
    for _, g in frame.groupby(["phase", "mode"], sort=True):
        step = max(1, len(g) // 6)
        keep += list(g.index[::step][:6])
    return frame.loc[sorted(keep)]


BURST_PHASES = ("isolated", "rate", "gap", "free-rate")


def bursts(frame: pd.DataFrame) -> pd.DataFrame:
    """For each of BURST_PHASES the experiment with the fewest rows (ties: the smallest K, B, G): all its rows."""
    keys = ["phase", "mode", "producers", "bytes_per_producer", "gap(us)"]
    sizes = frame[frame["phase"].isin(BURST_PHASES)].groupby(keys, sort=True).size().reset_index(name="rows")
    chosen = sizes.sort_values(["phase", "rows", "producers", "bytes_per_producer", "gap(us)"]).groupby("phase").head(1)
    mask = frame.set_index(keys).index.isin(chosen.set_index(keys).index)
    return frame[mask]


SLICES = [  # (slice path under data/, source under the checkout, rule, why)
    ("calibration/h200-pcie-host/points.parquet", "data/calibration/h200-pcie-host/points.parquet", points,
     "up to 6 points per (phase, mode), evenly spaced"),
    ("calibration/h200-pcie-host/bursts.parquet", "data/calibration/h200-pcie-host/bursts.parquet", bursts,
     "the smallest experiment of the isolated, rate, gap and free-rate phases"),
    ("attention/attention-kernel.parquet", "data/attention/attention-kernel.parquet",
     lambda f: f[f["M"].isin([8192, 16384])], "every variant at M = 8192 and 16384"),
    ("attention/attention-tile.parquet", "data/attention/attention-tile.parquet",
     lambda f: f[(f["M"] == 8192) & (f["schedule"] == "fused")], "the chosen fused kernel's tiles at M = 8192"),
    ("moe/moe-kernel.parquet", "data/moe/moe-kernel.parquet", lambda f: f[f["config"].isin(MOE_CONFIGS)],
     "every variant of the two h2048 configurations"),
    ("moe-dist/moe-kernel.parquet", "data/moe-dist/moe-kernel.parquet", lambda f: f[f["config"].isin(EP_CONFIGS)],
     "every variant and rank of the two h2048 EP = 2 configurations"),
]
PLATFORMS = ["calibration/h200-pcie-host/platform.json", "calibration/h200-nvlink/platform.json"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cut(out: Path) -> dict:
    """Write every slice and platform file into ``out``; returns the SOURCES listing."""
    sources = {}
    for rel, src, rule, why in SLICES:
        asked = "point" if Path(src).name == "points.parquet" else None   # version 1 kept points as summaries
        frame, meta = load_records(ROOT / src, asked)
        part = rule(frame).reset_index(drop=True)
        kind = asked or meta["kind"]
        table = meta.get("table") if kind == "summary" else None
        meta = {k: v for k, v in meta.items() if k not in ("kind", "schema_version", "table")}
        block = {"source": src, "source_sha256": sha256(ROOT / src), "rows": why, "source_rows": int(len(frame))}
        save_records(out / rel, kind, part, {**meta, "golden": block}, table=table, overwrite=True)
        sources[rel] = {**block, "kind": kind, "slice_rows": int(len(part))}
    for rel in PLATFORMS:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / "data" / rel, out / rel)
        sources[rel] = {"source": f"data/{rel}", "source_sha256": sha256(ROOT / "data" / rel), "rows": "copied"}
    (out / "SOURCES.json").write_text(json.dumps(sources, indent=2) + "\n")
    return sources


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(GOLDEN), help="folder to cut into (default: tests/golden/data)")
    args = p.parse_args(argv)
    for rel, info in cut(Path(args.out)).items():
        print(f"{rel}: {info.get('slice_rows', '-')} rows of {info['source']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
