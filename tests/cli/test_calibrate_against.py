"""``xstage calibrate --against PLATFORM``: a committed platform scored, nothing fitted, on every lockstep point of a
folder (``--records``) or of the run the command measures (docs/calibration/h100-broad24.md)."""

import json

import pytest

from xstage.paths import data_dir

EXTRA = data_dir() / "calibration-extra"
LOCAL1 = str(EXTRA / "h100-local" / "platform.json")


def test_card1_local_platform_on_the_third_cards_run_reads_as_call24_scored_it(cli):
    code, out, err = cli("calibrate", "--against", LOCAL1, "--records", str(EXTRA / "h100-local-r3"), "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    scored = json.loads((EXTRA / "call24-scores.json").read_text())["primary"]["L_local_on_wide"]
    assert row["every_point"] == pytest.approx(scored["every_point"], rel=1e-12)
    assert row["heldout_half"] == pytest.approx(scored["heldout_half"], rel=1e-12)
    assert row["meets"] is True and row["target"] == "local"
    assert row["records_gpu"].startswith("GPU-1f4eeba2") and row["platform_gpu"].startswith("GPU-f8be2b51")


def test_the_human_block_names_the_misses_worst_first(cli):
    pool = str(EXTRA / "h100-pcie-host-pool24" / "platform.json")
    code, out, _ = cli("calibrate", "--against", pool, "--records", str(EXTRA / "h100-pcie-host-fresh2"))
    assert code == 0
    assert "misses the targets: p90_rel_err_T_iss 25.9% > 15%" in out and "pooled over several runs" in out
    assert "6 of 25 lockstep pairs" in out
    first = out.splitlines()[out.splitlines().index(next(x for x in out.splitlines() if "knee ratio" in x)) + 1].split()
    assert first[:2] == ["28", "56"] and first[2].startswith("+603")   # (28, 56 KiB): ran free, predicted caught
    code, js, _ = cli("calibrate", "--against", pool, "--records", str(EXTRA / "h100-pcie-host-fresh2"), "--json")
    misses = json.loads(js)[0]["misses"]
    assert len(misses) == 6 and all(m["n_off"] >= 1 for m in misses)
    errs = [abs(m["median_rel_err_T_iss"]) for m in misses]
    assert errs == sorted(errs, reverse=True)


def test_a_simulated_sweep_is_scored_exactly_by_the_platform_that_simulated_it(cli, tmp_path):
    out_dir = tmp_path / "run"
    code, out, err = cli("calibrate", "--sim", "h200-pcie-host", "--target", "host", "--quick", "--out", str(out_dir),
                         "--against", "h200-pcie-host", "--quiet", "--json")
    assert code == 0, err
    summary = json.loads(out)
    (row,) = summary["against"]
    assert row["meets"] is True and row["misses"] == [] and row["every_point"]["n_points"] > 0
    assert row["every_point"]["p90_rel_err_T_iss"] < 1e-9 and row["every_point"]["p90_rel_err_period"] < 1e-9
    assert "against" not in json.loads((out_dir / "summary.json").read_text())   # the run's files are its own


@pytest.mark.parametrize("argv,field", [
    (["--against", "no-such-platform", "--records", str(EXTRA / "h100-local-r3")], "--against"),
    (["--against", LOCAL1, "--records", str(EXTRA / "h100-pcie-host-fresh2")], "--against"),   # local on host points
    (["--against", LOCAL1, "--records", "/nonexistent/folder"], "--records"),
    (["--against", LOCAL1, "--records", str(EXTRA / "h100-local-r3"), "--out", "/tmp/never-written"], "--out"),
])
def test_bad_input_is_one_line_and_status_2(cli, argv, field):
    code, out, err = cli("calibrate", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"xstage: error: {field}(=")


def test_an_unknown_platform_stops_a_sweep_before_it_runs(cli, tmp_path):
    code, _, err = cli("calibrate", "--sim", "h200-pcie-host", "--target", "host", "--quick", "--out",
                       str(tmp_path / "run"), "--against", "no-such-platform", "--quiet")
    assert code == 2 and "--against" in err
    assert not (tmp_path / "run").exists()
