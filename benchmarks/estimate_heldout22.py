"""``xstage calibrate --estimate`` on sweeps its time model was not fitted on (session 22): the H200's fresh15 and
fresh16 (measured after the fit of session 19) and the H100's seven sweeps (a GPU model never measured before).
Each folder's measured sweep time (``wall_s`` in its points' metadata: every run of a ``--repeat`` together) against
the estimate the CLI prints for the same target, grid and repeat (``total_wall_estimate_s``).

    python benchmarks/estimate_heldout22.py [--json OUT]     # no GPU, ~10 s
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee10 import write_new  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402

EXTRA = Path(__file__).resolve().parents[1] / "data" / "calibration-extra"
SWEEPS = {"h200-pcie-host-fresh15": ("host", "fresh15", 2), "h200-pcie-host-fresh16": ("host", "fresh16", 2),
          "h100-pcie-host": ("host", "wide", 1), "h100-pcie-host-r2": ("host", "wide", 1),
          "h100-local": ("local", "wide", 1), "h100-local-r2": ("local", "wide", 1),
          "h100-pcie-host-fresh16": ("host", "fresh16", 2), "h100-pcie-host-fresh15": ("host", "fresh15", 2),
          "h100-pcie-host-fresh": ("host", "fresh", 1)}


def estimate_s(target: str, grid: str, repeat: int) -> float:
    argv = [sys.executable, "-m", "xstage.cli", "calibrate", "--target", target, "--grid", grid, "--repeat",
            str(repeat), "--estimate", "--json"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return float(json.loads(out)["total_wall_estimate_s"])


def rows() -> list:
    out = []
    for folder, (target, grid, repeat) in SWEEPS.items():
        _, meta = load_records(EXTRA / folder / "points.parquet", "point")
        measured, est = float(meta["wall_s"]), estimate_s(target, grid, repeat)
        out.append({"folder": folder, "gpu": folder.split("-")[0], "target": target, "grid": grid, "repeat": repeat,
                    "measured_s": measured, "estimate_s": est, "rel_err": (est - measured) / measured})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rs = rows()
    for r in rs:
        print(f"{r['folder']:24s} {r['target']:5s} {r['grid']:8s} x{r['repeat']}  measured {r['measured_s']:5.1f} s  "
              f"estimate {r['estimate_s']:5.1f} s  {r['rel_err']:+.1%}")
    for gpu in ("h200", "h100"):
        e = [abs(r["rel_err"]) for r in rs if r["gpu"] == gpu]
        print(f"{gpu}: |error| median {statistics.median(e):.1%}, max {max(e):.1%} over {len(e)} sweeps")
    if args.json:
        write_new(args.json, {"rows": rs, "provenance": provenance()}, "estimate_heldout22")
    return 0


if __name__ == "__main__":
    sys.exit(main())
