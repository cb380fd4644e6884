"""floor24 (session 24, POST HOC, decides nothing): does an independent relaxing floor fix the H100's wide host grid?

Session 22 read two families of held-out misses on the H100 (docs/calibration/newgpu22.md): bursts just below the
knee read as backpressured, and large bursts after long gaps read short ("the H100 recovers less capacity from an
idle gap than the fitted relaxation allows"). The isolated bursts suggest the second: their V - R T_iss falls from
Q(K) to about 0.37 MiB, below the fitted Q_shared (0.64 MiB) that every two-stage law uses as its floor. This script
fits ``two-stage-lockq``'s check (``fit_knee.lockstep_issue_times_us``: Q_shared, q_sm and rho together on the fit
half's lockstep periodic points, each (K, B) pair weighing one) once as lockq has it (floor = Q_shared) and once
with a fourth parameter, the floor F on its own axis ([0, Q(K_max)]), on each ``pairs`` seed's fit half (0.3,
seeds 0-4, the product's default rule), and reports T_iss |rel err| median / p90 on the held-out lockstep points.
Issue law and R: the product's lockq fit of the same fit half.

    python benchmarks/calib_h100_floor24.py --json data/calibration-extra/h100-floor24-posthoc.json   # ~1 min
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee10 import fit_model, refuse_existing, write_new  # noqa: E402
from calib_newgpu22_scan import FRACTION, SEEDS, _points  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.fit_knee import lockstep_arrays, lockstep_issue_times_us  # noqa: E402
from xstage.sim.split_sweeps import split_by_rule  # noqa: E402

MiB = 2**20


def fit(arrays, R, q_max, k_max, free_floor: bool, grid: int = 14, rounds: int = 4) -> dict:
    """Grid search (``grid`` per axis, then ``rounds`` zooms of 7) of the squared relative T_iss errors."""
    K, V, T0, G, T, w = arrays

    def loss(qs, qsm, rho, floor):
        t = lockstep_issue_times_us(K, V, T0, G, R, qs, qsm, rho, floor if free_floor else qs)
        return float(np.sum(w * ((t - T) / T) ** 2))
    axes = [np.linspace(0, 2 * q_max, grid), np.linspace(0, 2 * q_max / k_max, grid),
            np.linspace(np.log(R / 200), np.log(0.95 * R), grid), np.linspace(0, q_max, grid if free_floor else 1)]
    best = None
    for _ in range(rounds + 1):
        for qs in axes[0]:
            for qsm in axes[1]:
                for x in axes[2]:
                    for floor in axes[3]:
                        v = loss(qs, qsm, np.exp(x), floor)
                        if best is None or v < best[0] - 1e-12:
                            best = (v, qs, qsm, x, floor)
        st = [(a[1] - a[0]) if len(a) > 1 else 0.0 for a in axes]
        axes = [np.linspace(max(best[1] - st[0], 0), best[1] + st[0], 7),
                np.linspace(max(best[2] - st[1], 0), best[2] + st[1], 7),
                np.linspace(best[3] - st[2], min(best[3] + st[2], np.log(0.95 * R)), 7),
                np.linspace(max(best[4] - st[3], 0), best[4] + st[3], 7) if free_floor else np.array([0.0])]
    return {"Q_shared": best[1], "q_sm": best[2], "rho": float(np.exp(best[3])),
            "floor": best[4] if free_floor else best[1], "loss": best[0]}


def scan(folder: str = "h100-pcie-host", log=print) -> list:
    pts = _points(folder)
    rows = []
    for seed in SEEDS:
        split = split_by_rule(pts, "pairs", FRACTION, seed)
        plat, _ = fit_model(pts[split.to_numpy() == "fit"], "two-stage-lockq", f"floor24-{seed}", "host")
        K, B, T0, G, T, w = lockstep_arrays(pts, plat)
        lock = pts[pts["mode"] == "periodic"].dropna(subset=["T_iss(us)"])
        held = np.asarray(split.reindex(lock[lock["T_iss(us)"] > 0].index)) == "heldout"
        V, R = K * B, plat.drain_rate_Bpus
        for free_floor in (False, True):
            f = fit(tuple(x[~held] for x in (K, V, T0, G, T, w)), R, plat.capacity_bytes(int(K.max())), K.max(),
                    free_floor)
            e = np.abs(lockstep_issue_times_us(K, V, T0, G, R, f["Q_shared"], f["q_sm"], f["rho"], f["floor"]) - T) / T
            r = {"folder": folder, "seed": seed, "law": "lockq + floor" if free_floor else "lockq",
                 "heldout_median_rel_err_T_iss": float(np.median(e[held])),
                 "heldout_p90_rel_err_T_iss": float(np.percentile(e[held], 90)), "n_heldout": int(held.sum()),
                 "Q_shared_MiB": f["Q_shared"] / MiB, "q_sm_KiB": f["q_sm"] / 1024, "rho_GBps": f["rho"] / 1e3,
                 "floor_MiB": f["floor"] / MiB}
            rows.append(r)
            log(f"seed {seed} {r['law']:13s} held-out T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
                f"{r['heldout_p90_rel_err_T_iss']:.1%}  Q_shared {r['Q_shared_MiB']:.2f} MiB q_sm {r['q_sm_KiB']:.1f} "
                f"KiB rho {r['rho_GBps']:.1f} GB/s floor {r['floor_MiB']:.2f} MiB", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True, help="the record to write (never overwritten)")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_h100_floor24")
    rows = scan()
    write_new(args.json, {"post_hoc": True, "note": "lockq's check with and without an independent relaxing floor, "
                          "fitted on each pairs seed's fit half of h100-pcie-host, judged on its held-out lockstep "
                          "points (T_iss only); decides nothing", "rows": rows, "provenance": provenance()},
              "calib_h100_floor24")
    return 0


if __name__ == "__main__":
    sys.exit(main())
