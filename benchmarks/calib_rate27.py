"""rate27 (session 27, POST HOC, decides nothing): a carried host platform with the card's own drain rate R.

    python benchmarks/calib_rate27.py --json data/calibration-extra/rate27-posthoc.json    # ~40 s

A lockstep point held by the drain has T_iss = V/R - G with its measured gap G: a small difference of two large
times, so its predicted T_iss moves (V/R) / T_iss times as much as R does (40-90 times on the knee grids). Cards 7 and
8 (session 27) fitted R 0.31-0.37 % above ``h100-pcie-host-pool24``'s, and pool24 missed 23 of their 132 pairs far
from the knee, every one predicted long. This record puts pool24 on every H100 host folder measured on another card
(cards 3-8), and the recommended H200 wide platform on every H200 host grid measured after it, twice: as committed,
and with R replaced by the folder's own fitted R (``xstage.sim.carried.with_drain_rate``; the folder's platform.json,
fitted on its fit half; ``xstage calibrate --against P --own-rate`` prints the same). Per folder and per card: call25's
claims (A: pairs far from the knee, ratio <= 0.8 or > 3, off by more than 15 % in T_iss; B: pairs at 1.0-1.5 off),
T_iss median / p90 over every lockstep point, and per knee-ratio bin which way the off pairs missed. Out of sample for
the platform, not for R: R comes from the points scored (from its fit half's drain-held points).
"""
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_call25 import claims, directions  # noqa: E402
from calib_knee10 import record_main  # noqa: E402
from calib_knee_band25 import EXTRA, H200_WIDE, folder_data, pairs_and_figures  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.carried import with_drain_rate  # noqa: E402
from xstage.sim.heldout_misses import MISS_LIMIT  # noqa: E402
from xstage.sim.platform import load_platform  # noqa: E402

H100_POOL = "h100-pcie-host-pool24"
H100_FOLDERS = ("fresh2", "fresh3", "fresh5", "fresh11", "fresh12", "fresh13", "fresh10", "fresh14", "fresh4",
                "fresh7", "fresh11-c27", "fresh12-c27", "fresh13-c27", "fresh11-c27b", "fresh12-c27b",
                "fresh13-c27b")
H200_FOLDERS = ("fresh", "fresh2", "fresh3", "fresh4", "fresh5", "fresh7", "fresh10", "fresh11", "fresh11-r2",
                "fresh12", "fresh12-r2", "fresh13-r1", "fresh13-r2", "fresh13-r3", "fresh14", "fresh15", "fresh16",
                "fresh16-r2")
GROUPS = {"H100": (H100_POOL, [f"h100-pcie-host-{g}" for g in H100_FOLDERS]),
          "H200": (H200_WIDE, [f"h200-pcie-host-{g}" for g in H200_FOLDERS])}


def gpu_uuid(folder: str) -> str:
    notes = load_platform(EXTRA / folder / "platform.json").notes or {}
    return ((notes.get("provenance") or {}).get("gpu") or {}).get("gpu_uuid") or "unknown"


def short(c: dict) -> dict:
    return {k: {"pairs": c[k]["pairs"], "pairs_off": c[k]["pairs_off"]} for k in ("A_far", "B_near")}


def score(log=print) -> dict:
    out = {}
    for gpu, (pname, folders) in GROUPS.items():
        base = load_platform(EXTRA / pname / "platform.json")
        per_folder, by_card = [], defaultdict(lambda: {"as_committed": [], "own_rate": []})
        pooled = {"as_committed": [], "own_rate": []}
        log(f"{gpu}: {pname} (R {base.drain_rate_GBps:.3f} GB/s) on {len(folders)} folders")
        for f in folders:
            _, points, own_r = folder_data(f)
            card = gpu_uuid(f)
            row = {"folder": f, "gpu_uuid": card, "own_R_GBps": own_r,
                   "R_shift": own_r / base.drain_rate_GBps - 1.0}
            for tag, plat in (("as_committed", base), ("own_rate", with_drain_rate(base, own_r))):
                pairs, figs = pairs_and_figures(plat, points)
                pooled[tag] += pairs
                by_card[card][tag] += pairs
                row[tag] = {"claims": short(claims(pairs)), "every_point": figs}
            per_folder.append(row)
            a, b = row["as_committed"]["claims"]["A_far"], row["own_rate"]["claims"]["A_far"]
            p90 = [row[t]["every_point"]["p90_rel_err_T_iss"] for t in ("as_committed", "own_rate")]
            log(f"  {f:30s} {card[:12]} R {row['R_shift']:+.2%}: far pairs off {a['pairs_off']:>2}/{a['pairs']:<3} "
                f"-> {b['pairs_off']:>2}/{b['pairs']:<3}  T_iss p90 {p90[0]:.1%} -> {p90[1]:.1%}")
        cards = {c: {tag: short(claims(v)) for tag, v in d.items()} for c, d in by_card.items()}
        total = {tag: {"claims": short(claims(v)), "directions": directions(v)} for tag, v in pooled.items()}
        for tag in pooled:
            t = total[tag]["claims"]
            log(f"  {gpu} {tag}: far {t['A_far']['pairs_off']}/{t['A_far']['pairs']}, "
                f"1.0-1.5 {t['B_near']['pairs_off']}/{t['B_near']['pairs']}")
        out[gpu] = {"platform": pname, "platform_R_GBps": base.drain_rate_GBps, "folders": per_folder,
                    "cards": cards, "total": total}
    return {"post_hoc": True, "miss_limit": MISS_LIMIT, "groups": out, "provenance": provenance()}


def main(argv=None) -> int:
    return record_main(argv, __doc__, "calib_rate27", score)


if __name__ == "__main__":
    raise SystemExit(main())
