"""newgpu22 (session 22): the recommended calibration on a second GPU model (an H100), scored as frozen in
data/calibration-extra/h100-newgpu-preregistration.md (written before the call).

    python benchmarks/calib_newgpu22.py --json data/calibration-extra/h100-newgpu22-scores.json   # ~3 min, no GPU
    python benchmarks/calib_newgpu22.py --second --json data/calibration-extra/h100-second-scores.json   # ~3 min

Primary 1 / 2: the held-out figures each wide run's own command wrote (summary.json, split ``pairs`` 0.3 seed 0),
host and local; met iff all four of issue 15's checks (``heldout_misses.meets_targets``). Secondary, deciding
nothing: seeds 1-4 refitted with the product's own ``xstage calibrate --refit`` on the same records; the second host
run's own verdict; combo18 (``--issue-law <host r1> --per-k-capacity``) on the H100's fresh16 folder, ``bracket``
seeds 0-4, met iff all four checks at >= 4 of 5; the H200's bundled platform on the H100's host points.

``--second``: the H100's second call, frozen in data/calibration-extra/h100-second-preregistration.md. Primary A:
combo18 on the H100's fresh15 folder (the issue law of ``h100-pcie-host``), met iff all four checks at >= 4 of 5
``bracket`` seeds. Primary B: the committed ``h100-pcie-host/platform.json`` unchanged on every lockstep point of the
H100's ``fresh`` folder, met iff all four checks. Beside them: the fresh folder's and ``h100-local-r2``'s own
held-out figures, ``h100-local``'s platform on ``h100-local-r2``, combo18 with the issue law of the second host run.
The JSON is written atomically and a file already there is never overwritten.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee10 import refuse_existing, write_new  # noqa: E402
from xstage.compare.platforms import locate_platform  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim.carried import carried as carried_points  # noqa: E402
from xstage.sim.heldout_misses import TARGETS, meets_targets  # noqa: E402

RULE = "data/calibration-extra/h100-newgpu-preregistration.md"
EXTRA = Path(__file__).resolve().parents[1] / "data" / "calibration-extra"
HOST, LOCAL, HOST2, KNEE = "h100-pcie-host", "h100-local", "h100-pcie-host-r2", "h100-pcie-host-fresh16"
KNEE2, BROAD, LOCAL2 = "h100-pcie-host-fresh15", "h100-pcie-host-fresh", "h100-local-r2"     # the second call
RULE2 = "data/calibration-extra/h100-second-preregistration.md"
SEEDS_NEEDED = 4          # combo18's fresh rule: all four checks at >= 4 of 5 seeds


def figures(summary: dict) -> dict:
    out = {key: summary.get(key) for key, _ in TARGETS}
    out["heldout_n_points"] = summary.get("heldout_n_points")
    out["meets"] = meets_targets(summary)
    return out


def own(name: str) -> dict:
    """A folder's own held-out figures, as its command wrote them."""
    return figures(json.loads((EXTRA / name / "summary.json").read_text()))


def refit(name: str, seed: int, *extra: str, log=print) -> dict:
    """``xstage calibrate --refit`` of one committed folder at one seed (into a temporary folder)."""
    with tempfile.TemporaryDirectory() as d:
        argv = [sys.executable, "-m", "xstage.cli", "calibrate", "--refit", "--records", str(EXTRA / name),
                "--split-seed", str(seed), "--heldout-fraction", "0.3", "--out", f"{d}/out", "--quiet", *extra]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"calib_newgpu22: {' '.join(argv[3:])} failed: {proc.stderr.strip()[-400:]}")
        r = {"seed": seed, **figures(json.loads(Path(f"{d}/out/summary.json").read_text()))}
    log(f"{name:24s} seed {seed}: T_iss {r['heldout_median_rel_err_T_iss']:.1%} / {r['heldout_p90_rel_err_T_iss']:.1%}"
        f", period {r['heldout_median_rel_err_period']:.1%} / {r['heldout_p90_rel_err_period']:.1%} "
        f"{'met' if r['meets'] else 'not met'}", flush=True)
    return r


def carried(platform_name: str, folder: str) -> dict:
    """One platform's T_iss and period errors on a folder's lockstep points (every point and the held-out half):
    ``xstage.sim.carried`` (``xstage calibrate --against``), less its verdict and pair list."""
    plat, where = locate_platform(platform_name)
    points, _ = load_records(EXTRA / folder / "points.parquet", "point")
    c = carried_points(points, plat)
    return {"platform": platform_name, "from": str(where), "every_point": c["every_point"],
            "heldout_half": c["heldout_half"]}


def combo18(folder: str, law_from: str, log=print) -> dict:
    """combo18 (``--issue-law law_from --per-k-capacity``, lockq, ``bracket``) on one knee folder, seeds 0-4."""
    rows = [refit(folder, s, "--model", "two-stage-lockq", "--split-rule", "bracket", "--issue-law",
                  str(EXTRA / law_from), "--per-k-capacity", log=log) for s in range(5)]
    met = sum(bool(r["meets"]) for r in rows)
    return {"issue_law_from": law_from, "met": met, "verdict": "met" if met >= SEEDS_NEEDED else "not met",
            "rows": rows}


def carried_verdict(platform_file: str, folder: str) -> dict:
    """``carried`` of a committed platform file on every lockstep point of a folder, with issue 15's verdict."""
    c = carried(str(EXTRA / platform_file), folder)
    c["platform"] = c["from"] = f"data/calibration-extra/{platform_file}"  # the checkout's path, not this machine's
    meets = meets_targets({f"heldout_{k}": v for k, v in c["every_point"].items()})
    return {**c, "meets": meets, "verdict": "met" if meets else "not met"}


def score_second(log=print) -> dict:
    a, b = combo18(KNEE2, HOST, log=log), carried_verdict(f"{HOST}/platform.json", BROAD)
    log(f"primary A (combo18 on {KNEE2}): {a['met']} of 5, {a['verdict']}")
    log(f"primary B ({HOST} platform on {BROAD}): {b['every_point']}, {b['verdict']}")
    return {"pre_registered": True, "rule": RULE2,
            "primary": {"A_combo18_fresh15": a, "B_wide_platform_on_fresh": b},
            "secondary": {"fresh_own": own(BROAD), "local_r2_own": own(LOCAL2),
                          "local_platform_on_local_r2": carried_verdict(f"{LOCAL}/platform.json", LOCAL2),
                          "combo18_fresh15_law_from_r2": combo18(KNEE2, HOST2, log=log)},
            "provenance": provenance()}


def score(log=print) -> dict:
    primary = {"host": own(HOST), "local": own(LOCAL)}
    for k, v in primary.items():
        log(f"primary {k}: {v}")
    gated2 = ("--model", "two-stage-gated2")
    seeds = {name: [refit(name, s, *gated2, log=log) for s in (1, 2, 3, 4)] for name in (HOST, LOCAL)}
    combo = [refit(KNEE, s, "--model", "two-stage-lockq", "--split-rule", "bracket", "--issue-law", str(EXTRA / HOST),
                   "--per-k-capacity", log=log) for s in range(5)]
    n_combo = sum(bool(r["meets"]) for r in combo)
    return {"pre_registered": True, "rule": RULE,
            "primary": {k: {**v, "verdict": "met" if v["meets"] else "not met"} for k, v in primary.items()},
            "secondary": {
                "seeds_1_4": {k: {"met": sum(bool(r["meets"]) for r in v), "rows": v} for k, v in seeds.items()},
                "host_r2_own": own(HOST2),
                "combo18_fresh16": {"met": n_combo, "verdict": "met" if n_combo >= SEEDS_NEEDED else "not met",
                                    "rows": combo},
                "h200_platform_on_h100_host": carried("h200-pcie-host", HOST)},
            "provenance": provenance()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--second", action="store_true", help="score the H100's second call (h100-second-preregistration.md)")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_newgpu22")
    if args.second:
        result = score_second()
        p = result["primary"]
        print(f"primary A {p['A_combo18_fresh15']['verdict']} ({p['A_combo18_fresh15']['met']} of 5), primary B "
              f"{p['B_wide_platform_on_fresh']['verdict']}")
        write_new(args.json, result, "calib_newgpu22")
        return 0
    result = score()
    s = result["secondary"]
    print(f"primary: host {result['primary']['host']['verdict']}, local {result['primary']['local']['verdict']}; "
          f"seeds 1-4 met: host {s['seeds_1_4'][HOST]['met']}, local {s['seeds_1_4'][LOCAL]['met']}; "
          f"host r2 {'met' if s['host_r2_own']['meets'] else 'not met'}; combo18 on fresh16 "
          f"{s['combo18_fresh16']['met']} of 5 ({s['combo18_fresh16']['verdict']})")
    write_new(args.json, result, "calib_newgpu22")
    return 0


if __name__ == "__main__":
    sys.exit(main())
