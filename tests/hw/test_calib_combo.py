"""``xstage calibrate --issue-law SRC ... --per-k-capacity`` (session 21): combo18 in the product. A refit of the
committed fresh15 records with knee10's five broad host grids as the issue law and a per-K capacity reproduces the
pre-registered score of ``benchmarks/calib_combo18.py`` (data/calibration-extra/fresh15-scores.json) figure for
figure, and records the law, the per-K capacities and where they came from; the flags refuse what they cannot fit in
one line (exit 2) before anything is measured or fitted."""

import json
from pathlib import Path

import pytest

from xstage.cli import main
from xstage.cli.exits import call
from xstage.sim.platform import Platform
from xstage.units import MiB

EXTRA = Path(__file__).resolve().parents[2] / "data" / "calibration-extra"
BROAD = [EXTRA / f"h200-pcie-host-{g}" for g in ("wide", "wide-3525cba", "fresh", "fresh2", "fresh3")]
FIGS = ("median_rel_err_T_iss", "p90_rel_err_T_iss", "median_rel_err_period", "p90_rel_err_period")


def _calibrate(capsys, *argv):
    code = call(lambda: main(["calibrate", *map(str, argv), "--json", "--quiet"]))
    got = capsys.readouterr()
    return code, (json.loads(got.out) if code == 0 else None), got.err


def _laws(*folders):
    return [a for f in folders for a in ("--issue-law", f)]


def test_the_refit_is_combo18_as_scored_on_fresh15(tmp_path, capsys):
    out = tmp_path / "c18"
    code, s, err = _calibrate(capsys, "--refit", "--records", EXTRA / "h200-pcie-host-fresh15", "--split-rule",
                              "bracket", "--split-seed", 3, *_laws(*BROAD), "--per-k-capacity", "--out", out)
    assert code == 0, err
    scored = json.loads((EXTRA / "fresh15-scores.json").read_text())
    row = next(r for r in scored["rows"] if (r["candidate"], r["seed"]) == ("combo18", 3))
    for k in FIGS:                                  # the recorded model (two-stage-lockq) is kept: no --model given
        assert s[f"heldout_{k}"] == pytest.approx(row[f"heldout_{k}"], rel=1e-12, abs=1e-15), k
    assert s["model"] == "two-stage-lockq" and not s["heldout_meets_targets"]   # seed 3: T_iss p90 15.7 %
    law = s["issue_law"]                            # combo18's law, as docs/calibration/combo18.md states it
    assert (round(law["t_fixed_us"], 3), round(law["producer_issue_GBps"], 1), law["store_buffer_bytes"],
            round(law["start_skew_us"], 3), law["injection_GBps"]) == (0.135, 59.2, 4096.0, 0.280, None)
    assert [Path(r["records"]) for r in law["records"]] == BROAD and all(r["n_points"] > 0 for r in law["records"])
    plat = Platform.load(out / "platform.json")
    caps = dict(plat.capacity_points)
    assert set(s["per_k_capacity"]["Q_MiB"]) == {"25", "57", "85", "115", "129"}
    for k, q in s["per_k_capacity"]["Q_MiB"].items():   # the platform written holds the searched Q(K)
        assert caps[int(k)] / MiB == pytest.approx(q, rel=1e-12)
    assert plat.sm_outstanding_bytes is None and plat.capacity_floor_bytes > 0
    assert plat.t_fixed_us == law["t_fixed_us"] and "issue_law" in plat.notes and "per_k_capacity" in plat.notes
    assert s["per_k_capacity"]["Q_MiB"] != s["per_k_capacity"]["Q_line_MiB"]   # the search moved some K off the line


@pytest.mark.parametrize("argv, field", [
    (["--model", "two-stage-gated2", "--per-k-capacity"], "--per-k-capacity"),
    (["--model", "v1", "--issue-law", str(EXTRA / "h200-pcie-host-wide")], "--issue-law"),
    (["--issue-law", str(EXTRA)], "--issue-law"),                                    # no points.parquet there
    (["--issue-law", str(EXTRA / "h200-local-wide")], "--issue-law"),                # a local calibration
])
def test_a_refit_refuses_what_the_flags_cannot_fit_in_one_line(tmp_path, capsys, argv, field):
    out = tmp_path / "o"
    code, _, err = _calibrate(capsys, "--refit", "--records", EXTRA / "h200-pcie-host-fresh15", *argv, "--out", out)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"xstage: error: {field}("), err
    assert not out.exists()


def test_a_sweep_refuses_the_flags_without_lockq_before_measuring(tmp_path, capsys):
    out = tmp_path / "o"
    code, _, err = _calibrate(capsys, "--target", "host", "--sim", "h200-pcie-host", "--quick", "--no-copy",
                              "--per-k-capacity", "--out", out)          # the default model is v1
    assert code == 2 and err.startswith("xstage: error: --per-k-capacity(") and err.count("\n") == 1
    assert not out.exists()
