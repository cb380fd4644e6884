"""Lockstep zero-gap runs simulated as run, with the barrier overlapping the drain (issue 15, item 4; session 7).

    python benchmarks/finite_runs_lockstep.py OUT.json

``finite_runs.lockstep`` on every platform of ``finite_runs.PLATFORMS`` against its wide grid's rate runs (the
recorded split's halves reported apart), then -- the rule committed before these were computed -- the
pre-registered platforms (``*-wide*``, fitted on the wide records) against the fresh grid's rate runs
(``h200-*-fresh``; the barrier time is the fresh run's own, from its fitted zero-gap points). The rule
(``lockstep_overlap``): every lockstep burst starts from a drained path (the barrier's system fence), so its
issue time is the isolated one, and the next starts at max(drained, issue end + barrier) + G -- the barrier runs
while the path drains, so a drain-bound period is V / R, not V / R + barrier (``as_run``, isolated mode, adds it).
Since session 8 the rule is the simulator's ``xstage sim bursts --mode lockstep --barrier-us X``
(``finite_runs.lockstep`` runs it); the record's figures are reproduced (``tests/sim/test_lockstep_mode.py``).
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import finite_runs as fr  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.platform import load_platform  # noqa: E402


def _figures(v) -> str:
    return (f"T {v['T_iss']['median_rel_err']:.3f}/{v['T_iss']['p90_rel_err']:.3f} P {v['period']['median_rel_err']:.3f}/"
            f"{v['period']['p90_rel_err']:.3f}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or os.path.exists(argv[0]):
        print("usage: finite_runs_lockstep.py OUT.json (OUT must not exist: records are never overwritten)",
              file=sys.stderr)
        return 2
    out = {"what": "lockstep zero-gap rate runs of the wide grids simulated as run; lockstep_overlap: the next burst "
           "at max(drained, issue end + barrier)", "provenance": provenance(with_gpu=False)}
    for label, path in fr.PLATFORMS.items():
        grid = path.parent.parent / ("h200-pcie-host-wide" if label.startswith("host") else "h200-local-wide")
        r = fr.lockstep(grid, load_platform(path))
        out[label] = r
        print(label, "as_run", _figures(r["as_run"]), " | ".join(
            f"{h}: {_figures(v)} (n={v['period']['n']}, P within10 {v['period']['within_10pct']:.2f})"
            for h, v in r["lockstep_overlap"].items()), flush=True)
    for label, path in fr.PLATFORMS.items():          # the fresh grid's rate runs, the pre-registered platforms
        fresh = path.parent.parent / ("h200-pcie-host-fresh" if label.startswith("host") else "h200-local-fresh")
        r = fr.lockstep(fresh, load_platform(path))
        out[f"{label} on fresh"] = r
        print(label, "on fresh:", " | ".join(
            f"{h}: T {v['T_iss']['median_rel_err']:.3f}/{v['T_iss']['p90_rel_err']:.3f} (within10 "
            f"{v['T_iss']['within_10pct']:.2f}) P {v['period']['median_rel_err']:.3f}/{v['period']['p90_rel_err']:.3f} "
            f"(n={v['period']['n']}, within10 {v['period']['within_10pct']:.2f})"
            for h, v in r["lockstep_overlap"].items()), flush=True)
    tmp = argv[0] + ".tmp"                             # temp file + rename: never a half-written record
    with open(tmp, "w") as fh:
        fh.write(json.dumps(out, indent=1, default=str))
    os.replace(tmp, argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
