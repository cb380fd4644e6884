"""cards25 (session 25, POST HOC, decides nothing): where the knee sits on each of the three H100s measured so far.

    python benchmarks/calib_h100_cards25.py --json data/calibration-extra/h100-cards25-posthoc.json   # ~10 s

call24 carried ``h100-pcie-host-pool24`` (two cards) to a third card's broad grids and missed: its worst pairs were
predicted backpressured and ran free. This reads, from committed points only, how large a burst from a drained path
runs free on each card. Per card (the GPU uuid in the records' provenance) and K, over the bursts that start from a
drained path (lockstep ``plateau`` points, and ``isolated`` points apart, the two protocols' knees differ,
docs/calibration/h100-broad24.md): ``free_MiB`` the largest V = K B whose T_iss stayed within FREE x the reference
T_iss0(K, B), ``caught_MiB`` the smallest V whose T_iss took at least CAUGHT x it. The reference issue law is
``h100-pcie-host-pool24``'s (fitted on cards 1 and 2), the same for every card, so a card that issues slower reads as
caught sooner, not later. A card's Q(K) lies above its free V minus the drain during the issue and below its caught
V; where ``free_MiB`` on one card is above ``caught_MiB`` on another at a K at or above it, the two cards' knees
differ whatever the law.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee10 import refuse_existing, write_new  # noqa: E402
from xstage.compare.platforms import locate_platform  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402

EXTRA = Path(__file__).resolve().parents[1] / "data" / "calibration-extra"
REFERENCE = "h100-pcie-host-pool24"
FOLDERS = ("h100-pcie-host", "h100-pcie-host-r2", "h100-pcie-host-fresh16", "h100-pcie-host-fresh15",
           "h100-pcie-host-fresh", "h100-pcie-host-fresh2", "h100-pcie-host-fresh3", "h100-pcie-host-fresh5")
FREE, CAUGHT = 1.4, 2.0
MIB = 2**20


def brackets(folders=FOLDERS) -> dict:
    """{card uuid: {"folders": [...], "plateau": {K: {...}}, "isolated": {K: {...}}}} (see the module doc)."""
    ref, _ = locate_platform(str(EXTRA / REFERENCE / "platform.json"))
    cards: dict = {}
    for folder in folders:
        points, meta = load_records(EXTRA / folder / "points.parquet", "point")
        card = cards.setdefault(meta["provenance"]["gpu"]["gpu_uuid"], {"folders": [], "plateau": {}, "isolated": {}})
        card["folders"].append(folder)
        for d in points.to_dict("records"):
            kind = "isolated" if d["mode"] == "isolated" else ("plateau" if d["phase"] == "plateau" else None)
            if kind is None or not d["T_iss(us)"] > 0:
                continue
            k, b = int(d["producers"]), float(d["bytes_per_producer"])
            ratio = d["T_iss(us)"] / ref.issue_time0_us(k, b)
            row = card[kind].setdefault(k, {"free_MiB": None, "caught_MiB": None, "n_points": 0})
            row["n_points"] += 1
            v = k * b / MIB
            if ratio <= FREE and (row["free_MiB"] is None or v > row["free_MiB"]):
                row["free_MiB"] = v
            if ratio >= CAUGHT and (row["caught_MiB"] is None or v < row["caught_MiB"]):
                row["caught_MiB"] = v
    for card in cards.values():
        for kind in ("plateau", "isolated"):
            card[kind] = {str(k): card[kind][k] for k in sorted(card[kind])}
    return cards


def contradictions(cards: dict, kind: str = "isolated") -> list[dict]:
    """Pairs of cards whose knees cannot be one: card a ran free a V at K_a above what card b caught at K_b >= K_a
    (Q grows with K on every fitted platform, so card b's Q(K_a) <= Q(K_b) < V)."""
    out = []
    for a, ca in cards.items():
        for b, cb in cards.items():
            if a == b:
                continue
            for ka, ra in ca[kind].items():
                for kb, rb in cb[kind].items():
                    if (int(kb) >= int(ka) and ra["free_MiB"] is not None and rb["caught_MiB"] is not None
                            and ra["free_MiB"] > rb["caught_MiB"]):
                        out.append({"free_card": a, "K_free": int(ka), "free_MiB": ra["free_MiB"], "caught_card": b,
                                    "K_caught": int(kb), "caught_MiB": rb["caught_MiB"]})
    return sorted(out, key=lambda r: (r["free_card"], r["K_free"], r["K_caught"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="write the result here (refuses an existing file)")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_h100_cards25")
    cards = brackets()
    for uuid, card in cards.items():
        print(f"{uuid[:12]} ({', '.join(card['folders'])})")
        for kind in ("plateau", "isolated"):
            cells = [f"K{k}:[{r['free_MiB'] or 0:.2f},{r['caught_MiB'] or float('nan'):.2f}]"
                     for k, r in card[kind].items()]
            print(f"  {kind:8s} " + " ".join(cells))
    found = {kind: contradictions(cards, kind) for kind in ("plateau", "isolated")}
    for kind, rows in found.items():
        print(f"{kind}: {len(rows)} card pairs (K, K') where one card ran free a V the other caught")
        for r in rows[:12]:
            print(f"  {r['free_card'][:12]} K{r['K_free']} free at {r['free_MiB']:.2f} MiB > "
                  f"{r['caught_card'][:12]} K{r['K_caught']} caught at {r['caught_MiB']:.2f} MiB")
    write_new(args.json, {"post_hoc": True, "reference_issue_law": REFERENCE, "free_ratio": FREE,
                          "caught_ratio": CAUGHT, "cards": cards, "contradictions": found, "provenance": provenance()}, "calib_h100_cards25")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
