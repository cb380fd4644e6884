"""own28 (session 28, POST HOC, decides nothing): on the H100 broad grids of cards 3, 15, 16 and 17, each folder's own
calibration (the product's refit on its recorded split) against the platforms carried from other cards.

    python benchmarks/calib_own28.py --json data/calibration-extra/own28-posthoc.json    # 24 refits, ~5 min

For each of call24's broad grids (``fresh2``, ``fresh3``, ``fresh5``) as measured on card 3 (call24), card 15
(call28c), card 16 (call28d) and card 17 (call28d's repeat): ``xstage calibrate --target host --refit --records F
--model M`` with ``two-stage-gated2`` (the recommended calibration) and ``two-stage-lockq --per-k-capacity``, each
judged on the folder's recorded held-out pairs (``heldout_*`` of its summary); beside them the carried platforms'
figures on every lockstep point from the session-28 scores (``knee28-posthoc.json``, ``call28c-scores.json``,
``call28d-scores.json``, ``call28d-card17-scores.json``; each folder at its median zero-gap R).
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee10 import record_main  # noqa: E402
from calib_knee28 import KNEE28, PERK, POOL24  # noqa: E402
from calib_knee_band25 import EXTRA  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

CARDS = {"card 3": "", "card 15": "-call28c", "card 16": "-call28d", "card 17": "-c28e"}
GRIDS = ("fresh2", "fresh3", "fresh5")
MODELS = {"two-stage-gated2": (), "two-stage-lockq --per-k-capacity": ("--per-k-capacity",)}
FIGS = ("heldout_median_rel_err_T_iss", "heldout_p90_rel_err_T_iss", "heldout_median_rel_err_period",
        "heldout_p90_rel_err_period", "heldout_meets_targets", "heldout_n_pairs")
SCORES = ("knee28-posthoc.json", "call28c-scores.json", "call28d-scores.json", "call28d-card17-scores.json")


def own_fit(folder: str, model: str, flags: tuple) -> dict:
    """The product's refit of ``folder`` with ``model`` on its recorded split: its held-out figures."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-m", "xstage.cli", "calibrate", "--target", "host", "--refit",
                               "--records", str(EXTRA / folder), "--model", model.split()[0], *flags, "--out",
                               str(Path(tmp) / "out"), "--quiet", "--json"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"refit of {folder} with {model} failed: {proc.stderr.strip()[-300:]}")
    summary = json.loads(proc.stdout)
    return {k: summary.get(k) for k in FIGS}


def carried() -> dict:
    """{folder: {platform: every-point figures}} from the committed session-28 scores (median R)."""
    out = {}
    for name in SCORES:
        rec = json.loads((EXTRA / name).read_text())
        for plat in (KNEE28, PERK, POOL24):
            for folder, figs in rec["platforms"][plat].get("folders", rec["platforms"][plat].get("per_folder", {})).items():
                out.setdefault(folder, {})[plat] = figs
    return out


def score(log=print) -> dict:
    carry = carried()
    rows = []
    for card, suffix in CARDS.items():
        for grid in GRIDS:
            folder = f"h100-pcie-host-{grid}{suffix}"
            row = {"card": card, "folder": folder, "own": {m: own_fit(folder, m, f) for m, f in MODELS.items()},
                   "carried": carry[folder]}
            rows.append(row)
            own = ", ".join(f"{m.split()[0]} {v['heldout_p90_rel_err_T_iss']:.1%}{' meets' if v['heldout_meets_targets'] else ''}"
                            for m, v in row["own"].items())
            car = ", ".join(f"{p[15:]} {v['p90_rel_err_T_iss']:.1%}" for p, v in row["carried"].items())
            log(f"{card:8s} {folder:32s} own held-out p90: {own}; carried p90: {car}", flush=True)
    return {"post_hoc": True, "rows": rows, "provenance": provenance()}


def main(argv=None) -> int:
    return record_main(argv, __doc__, "calib_own28", score, needed=tuple(
        f"h100-pcie-host-{g}{s}" for s in CARDS.values() for g in GRIDS))


if __name__ == "__main__":
    raise SystemExit(main())
