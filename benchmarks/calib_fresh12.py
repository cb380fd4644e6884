"""The first fresh test of ``--model two-stage-lockq``'s own-fit host refit under ``--split-rule bracket``: the score
of ``--grid fresh12`` (session 14, knee17), exactly as pre-registered in data/calibration-extra/
fresh12-preregistration.md (committed before the device call; docs/calibration/knee17.md).

    python benchmarks/calib_fresh12.py score --json OUT      # 2 models x 10 splits x 2 targets = 40 refits; ~5 min

Each refit runs the product -- ``xstage calibrate --refit --records R --model M --split-rule RULE --split-seed s``,
through ``hw.calib.calibrate.refit`` into a temporary folder (``calib_fresh11.one``) -- and reads its summary's
held-out lockstep periodic T_iss and period |rel err| median / p90. **Primary** (decides): ``two-stage-lockq``,
``bracket`` (0.3), seeds 0-4, host: met iff all four checks (medians <= 0.05, p90s <= 0.15) hold at >= 4 of 5 seeds;
local the same rule, a second claim. **Secondary** (judges nothing): ``two-stage-gated2-span-cc`` under ``bracket``
and both models under ``pairs`` seeds 0-4. The JSON is written atomically and a file already there is never
overwritten.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calib_fresh11  # noqa: E402
from calib_fresh11 import EXTRA  # noqa: E402
from calib_knee10 import refuse_existing, write_new  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

RECORDS = {"host": EXTRA / "h200-pcie-host-fresh12", "local": EXTRA / "h200-local-fresh12"}
PRIMARY = "two-stage-lockq"
MODELS = (PRIMARY, "two-stage-gated2-span-cc")
RULE = ("met iff `xstage calibrate --refit --records <fresh12> --model two-stage-lockq --split-rule bracket "
        "--split-seed s`, s = 0..4, has held-out lockstep T_iss and period |rel err| median <= 0.05 and p90 <= 0.15 "
        "(all four) at >= 4 of 5 seeds; host decides, local is reported under the same rule "
        "(data/calibration-extra/fresh12-preregistration.md)")


def decide(rows) -> dict:
    return calib_fresh11.decide(rows, RECORDS, PRIMARY, RULE)


def score(log=print) -> list:
    return calib_fresh11.score(log, RECORDS, MODELS)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("score",))
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_fresh12")
    rows = score()
    write_new(args.json, {"pre_registered": True, "provenance": provenance(), "decision": decide(rows),
                          "rows": rows, "records": {t: str(p.relative_to(EXTRA.parents[1])) for t, p in
                                                    RECORDS.items()}}, "calib_fresh12")
    return 0


if __name__ == "__main__":
    sys.exit(main())
