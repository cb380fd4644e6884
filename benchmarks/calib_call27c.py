"""call27c (session 27): pool27's lockq platform with a capacity per K, pooled over H100 cards 1 and 2, scored with
each folder's own R on call25's knee grids measured on another H100, as frozen in
data/calibration-extra/call27c-preregistration.md.

    python benchmarks/calib_call27c.py --json data/calibration-extra/call27c-scores.json
    python benchmarks/calib_call27c.py --card12 --json data/calibration-extra/call27c-card12-scores.json   # a repeat

L1: ``h100-pcie-host-pool27-lockq-perk``'s T_iss p90 on every lockstep point at most 35 % on each of the three
``*-call27c`` folders. L2: below ``h100-pcie-host-pool24``'s on each. L3: fewer lockstep pairs off by more than 15 %
than pool24's over the three together. Met iff all three. Every platform with each folder's own fitted R
(``xstage.sim.carried.with_drain_rate``). Secondary: ``h100-pcie-host-pool27-lockq`` beside them, the four checks per
folder, per-bin directions, call27's claims for pool24 with own R. ``--card12``: the same claims on the same grids
measured again on a twelfth H100 (``*-c27d``), a repeat decided at the device, not pre-registered.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_call25 import directions  # noqa: E402
from calib_call27 import primary as call27_primary  # noqa: E402
from calib_knee10 import record_main  # noqa: E402
from calib_knee_band25 import EXTRA, folder_data, pairs_and_figures  # noqa: E402
from calib_rate27 import gpu_uuid  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.carried import with_drain_rate  # noqa: E402
from xstage.sim.platform import load_platform  # noqa: E402

RULE = "data/calibration-extra/call27c-preregistration.md"
CANDIDATE, BASE, ALSO = ("h100-pcie-host-pool27-lockq-perk", "h100-pcie-host-pool24", "h100-pcie-host-pool27-lockq")
FOLDERS = tuple(f"h100-pcie-host-fresh1{i}-call27c" for i in (1, 2, 3))
CARD12 = tuple(f"h100-pcie-host-fresh1{i}-c27d" for i in (1, 2, 3))   # session 27's repeat, not pre-registered
P90_MAX = 0.35


def per_platform(name: str, data) -> dict:
    base = load_platform(EXTRA / name / "platform.json")
    rows, folders = [], {}
    for f, points, own_r in data:
        pairs, figs = pairs_and_figures(with_drain_rate(base, own_r), points)
        rows += pairs
        folders[f] = {**figs, "pairs": len(pairs), "pairs_off": sum(p["off"] for p in pairs)}
    return {"folders": folders, "pairs": len(rows), "pairs_off": sum(r["off"] for r in rows),
            "directions": directions(rows), "rows": rows}


def log_platforms(plats: dict, log) -> None:
    """One line per ``per_platform`` result: its T_iss p90 per folder and its pairs off."""
    for n, v in plats.items():
        p90 = ", ".join(f"{x['p90_rel_err_T_iss']:.1%}" for x in v["folders"].values())
        log(f"  {n:34s} T_iss p90 per folder {p90}; pairs off {v['pairs_off']} of {v['pairs']}")


def claims(cand: dict, base: dict) -> dict:
    p90 = {f: v["p90_rel_err_T_iss"] for f, v in cand["folders"].items()}
    base_p90 = {f: v["p90_rel_err_T_iss"] for f, v in base["folders"].items()}
    l1 = all(v <= P90_MAX for v in p90.values())
    l2 = all(p90[f] < base_p90[f] for f in p90)
    l3 = cand["pairs_off"] < base["pairs_off"]
    return {"L1_p90_each_at_most_35": {"p90": p90, "met": l1}, "L2_below_pool24_each": {"pool24_p90": base_p90,
            "met": l2}, "L3_fewer_pairs_off": {"candidate": cand["pairs_off"], "pool24": base["pairs_off"],
                                              "pairs": cand["pairs"], "met": l3},
            "verdict": "met" if l1 and l2 and l3 else "not met"}


def score(folders=FOLDERS, log=print, pre_registered: bool = True) -> dict:
    data = [folder_data(f) for f in folders]
    plats = {n: per_platform(n, data) for n in (CANDIDATE, BASE, ALSO)}
    c = claims(plats[CANDIDATE], plats[BASE])
    log(f"with each folder's own R, on {', '.join(folders)} ({gpu_uuid(folders[0])[:12]}):")
    log_platforms(plats, log)
    log(f"L1 (each p90 <= 35 %): {'met' if c['L1_p90_each_at_most_35']['met'] else 'not met'}; L2 (below pool24's on "
        f"each): {'met' if c['L2_below_pool24_each']['met'] else 'not met'}; L3 (fewer pairs off): "
        f"{'met' if c['L3_fewer_pairs_off']['met'] else 'not met'}; primary: {c['verdict']}")
    secondary = call27_primary(plats[BASE]["rows"])
    log(f"secondary, call27's claims for pool24 with own R: {secondary['verdict']}")
    return {"pre_registered": pre_registered, "rule": RULE, "folders": list(folders), "gpu_uuid": gpu_uuid(folders[0]),
            "own_R_GBps": {f: r for f, _, r in data}, "primary": c,
            "platforms": {n: {k: v for k, v in p.items() if k != "rows"} for n, p in plats.items()},
            "secondary_call27_claims_pool24": secondary, "provenance": provenance()}


def main(argv=None) -> int:
    card12 = ("score the repeat on a twelfth H100 (session 27, the *-c27d folders; not pre-registered)",
              lambda: score(CARD12, pre_registered=False), CARD12)
    return record_main(argv, __doc__, "calib_call27c", score, needed=FOLDERS, variants={"--card12": card12})


if __name__ == "__main__":
    raise SystemExit(main())
