"""knee28 (session 28, POST HOC, decides nothing): lockq with a capacity per K pooled over the knee grids of seven
H100s, against pool27's (the same law pooled over two cards' broad grids) and pool24, on every H100 host folder.

    python benchmarks/calib_knee28.py --json data/calibration-extra/knee28-posthoc.json    # ~15 s

``h100-pcie-host-knee28-lockq-perk``: ``two-stage-lockq --per-k-capacity`` fitted on every point of call25's three
knee grids (``fresh11``-``fresh13``) as measured on cards 4, 7, 8, 9, 11, 12 and 13 (21 folders; the command is in its
README). Each platform is scored with each folder's median zero-gap R (call28's rule) on the 28 H100 host folders of
cards 3-13: per folder issue 15's T_iss p90 on every lockstep point and whether the folder is in knee28's pool (in
sample) or not (cards 3, 5, 6 and 10: out of sample). Chosen after looking: knee28 was fitted in session 28 after
every folder here had been seen.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_call27c import per_platform  # noqa: E402
from calib_knee10 import record_main  # noqa: E402
from calib_knee_band25 import folder_data  # noqa: E402
from calib_rate27 import gpu_uuid  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

KNEE28, PERK, POOL24 = ("h100-pcie-host-knee28-lockq-perk", "h100-pcie-host-pool27-lockq-perk", "h100-pcie-host-pool24")
POOLED = tuple(f"h100-pcie-host-fresh1{i}{s}" for s in ("", "-c27", "-c27b", "-call27", "-call27c", "-c27d", "-call28")
               for i in (1, 2, 3))
OTHERS = tuple(f"h100-pcie-host-{g}" for g in ("fresh2", "fresh3", "fresh5", "fresh10", "fresh14", "fresh4", "fresh7",
                                                  "fresh10-call27b", "fresh14-call27b"))   # cards 3, 5, 6, 10


def score(log=print) -> dict:
    data = [folder_data(f, "median") for f in POOLED + OTHERS]
    out = {}
    for name in (KNEE28, PERK, POOL24):
        folders = per_platform(name, data)["folders"]
        p90 = {f: v["p90_rel_err_T_iss"] for f, v in folders.items()}
        groups = {"in_sample": [p90[f] for f in POOLED], "out_of_sample": [p90[f] for f in OTHERS]}
        out[name] = {"p90_T_iss": p90, "per_folder": folders,
                     **{f"{g}_p90_median": float(np.median(v)) for g, v in groups.items()},
                     **{f"{g}_p90_max": float(max(v)) for g, v in groups.items()}}
        log(f"{name:34s} T_iss p90 per folder: knee28's pool (21) median {out[name]['in_sample_p90_median']:.1%} "
            f"max {out[name]['in_sample_p90_max']:.1%}; the other {len(OTHERS)} median {out[name]['out_of_sample_p90_median']:.1%}"
            f" max {out[name]['out_of_sample_p90_max']:.1%}")
    return {"post_hoc": True, "rate_rule": "median", "pooled": list(POOLED), "others": list(OTHERS),
            "gpu_uuid": {f: gpu_uuid(f) for f in POOLED + OTHERS}, "platforms": out, "provenance": provenance()}


def main(argv=None) -> int:
    return record_main(argv, __doc__, "calib_knee28", score, needed=POOLED + OTHERS)


if __name__ == "__main__":
    raise SystemExit(main())
