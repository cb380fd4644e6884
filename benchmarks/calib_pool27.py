"""pool27 (session 27, POST HOC, decides nothing): which model, pooled over H100 cards 1 and 2, carries best to the
host grids of cards 3-9.

    python benchmarks/calib_pool27.py --json data/calibration-extra/pool27-posthoc.json    # ~10 s

Three platforms fitted on the same points (card 1's ``h100-pcie-host`` and the fit halves of ``-r2`` and card 2's
``-fresh``; the commands are in each folder's README): ``h100-pcie-host-pool24`` (``two-stage-gated2``, committed in
session 24), ``h100-pcie-host-pool27-lockq`` (``two-stage-lockq``: Q_shared, q_sm and rho chosen together by the model
check on the lockstep points) and ``h100-pcie-host-pool27-lockq-perk`` (lockq with a capacity per K,
``--per-k-capacity``). Each is scored with every folder's own fitted R (``xstage.sim.carried.with_drain_rate``; rate27)
on every H100 host folder of cards 3-9 (``calib_rate27.H100_FOLDERS`` and call27's): per folder, issue 15's four
checks on every lockstep point and call25's A / B counts; pooled, the pairs off by more than 15 % per knee-ratio bin
and the median and largest per-folder T_iss p90. Chosen after looking: the platforms were fitted in session 27 after
every folder scored here had been seen.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_call25 import claims, directions  # noqa: E402
from calib_knee10 import record_main  # noqa: E402
from calib_knee_band25 import EXTRA, folder_data, pairs_and_figures  # noqa: E402
from calib_rate27 import H100_FOLDERS, gpu_uuid  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.carried import with_drain_rate  # noqa: E402
from xstage.sim.platform import load_platform  # noqa: E402

PLATFORMS = ("h100-pcie-host-pool24", "h100-pcie-host-pool27-lockq", "h100-pcie-host-pool27-lockq-perk")
FOLDERS = tuple(f"h100-pcie-host-{g}" for g in H100_FOLDERS) + tuple(
    f"h100-pcie-host-fresh1{i}-call27" for i in (1, 2, 3))


def score(log=print) -> dict:
    data = [folder_data(f) for f in FOLDERS]
    out = {}
    for name in PLATFORMS:
        base = load_platform(EXTRA / name / "platform.json")
        rows, per_folder = [], []
        for f, points, own_r in data:
            pairs, figs = pairs_and_figures(with_drain_rate(base, own_r), points)
            rows += pairs
            meets = figs["median_rel_err_T_iss"] <= 0.05 and figs["p90_rel_err_T_iss"] <= 0.15 and \
                figs["median_rel_err_period"] <= 0.05 and figs["p90_rel_err_period"] <= 0.15
            per_folder.append({"folder": f, "gpu_uuid": gpu_uuid(f), "every_point": figs, "meets": bool(meets),
                               "pairs": len(pairs), "pairs_off": sum(p["off"] for p in pairs)})
        p90 = [r["every_point"]["p90_rel_err_T_iss"] for r in per_folder]
        n_off = sum(r["off"] for r in rows)
        c = claims(rows)
        out[name] = {"pairs": len(rows), "pairs_off": n_off, "A_far": c["A_far"], "B_near": c["B_near"],
                     "p90_T_iss_median_over_folders": float(np.median(p90)), "p90_T_iss_max": float(max(p90)),
                     "folders_meeting": sum(r["meets"] for r in per_folder), "directions": directions(rows),
                     "per_folder": per_folder}
        log(f"{name:34s} pairs off {n_off:>3} of {len(rows)}; far {c['A_far']['pairs_off']} of {c['A_far']['pairs']}"
            f", 1.0-1.5 {c['B_near']['pairs_off']} of {c['B_near']['pairs']}; T_iss p90 per folder median "
            f"{np.median(p90):.1%}, max {max(p90):.1%}; folders meeting issue 15's checks "
            f"{out[name]['folders_meeting']} of {len(per_folder)}")
    return {"post_hoc": True, "own_rate": True, "folders": list(FOLDERS), "platforms": out,
            "provenance": provenance()}


def main(argv=None) -> int:
    return record_main(argv, __doc__, "calib_pool27", score)


if __name__ == "__main__":
    raise SystemExit(main())
