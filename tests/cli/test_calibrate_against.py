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


def test_own_rate_recovers_a_simulated_run_whose_platform_differs_only_in_R(cli, tmp_path):
    from importlib import resources

    from xstage.sim import platform as plat
    slow = json.loads((resources.files(plat._BUNDLED_PACKAGE) / "platforms" / "h200-pcie-host.json").read_text())
    true_R = slow["drain_rate_GBps"]
    slow.update(name="h200-slow-R", drain_rate_GBps=true_R * 0.995)
    (tmp_path / "slow.json").write_text(json.dumps(slow))
    code, out, err = cli("calibrate", "--sim", "h200-pcie-host", "--target", "host", "--quick", "--out",
                         str(tmp_path / "run"), "--against", str(tmp_path / "slow.json"), "--own-rate", "fit", "--quiet",
                         "--json")
    assert code == 0, err
    carried_as_is, own = json.loads(out)["against"]
    assert carried_as_is["drain_rate_from"] == "platform" and own["drain_rate_from"].endswith("platform.json")
    assert own["drain_rate_GBps"] == pytest.approx(true_R, rel=1e-6)
    assert carried_as_is["every_point"]["median_rel_err_T_iss"] > 1e-3      # 0.5 % off in R shows
    assert own["every_point"]["p90_rel_err_T_iss"] < 1e-9 and own["every_point"]["p90_rel_err_period"] < 1e-9


def test_own_rate_removes_the_seventh_cards_far_misses_and_keeps_its_knee_misses(cli):
    pool = str(EXTRA / "h100-pcie-host-pool24" / "platform.json")
    code, out, err = cli("calibrate", "--against", pool, "--own-rate", "fit", "--records",
                         str(EXTRA / "h100-pcie-host-fresh11-c27"), "--json")
    assert code == 0, err
    as_is, own = json.loads(out)
    assert as_is["drain_rate_GBps"] == pytest.approx(52.677, abs=1e-3)
    assert own["platform_R_GBps"] == as_is["drain_rate_GBps"]
    assert own["drain_rate_GBps"] == pytest.approx(52.873, abs=1e-3)   # the folder's fitted R, 0.37 % higher
    far = lambda row: {(m["producers"], m["bytes_per_producer"]) for m in row["misses"]  # noqa: E731
                       if m["knee_ratio"] is not None and (m["knee_ratio"] <= 0.8 or m["knee_ratio"] > 3)}
    assert far(as_is) and not far(own)      # (122, 14 KiB) and the other far pairs: R alone
    assert (62, 30 * 1024) in {(m["producers"], m["bytes_per_producer"]) for m in own["misses"]}   # the knee stays
    assert len(own["misses"]) < len(as_is["misses"])


@pytest.mark.parametrize("argv,field", [
    (["--own-rate", "--records", str(EXTRA / "h100-local-r3")], "--own-rate"),   # no --against
])
def test_own_rate_without_a_platform_is_one_line_and_status_2(cli, argv, field):
    code, out, err = cli("calibrate", *argv)
    assert code == 2 and out == "" and err.startswith(f"xstage: error: {field}(=")


def test_own_rate_on_a_folder_without_its_fit_is_one_line_and_status_2(cli, tmp_path):
    (tmp_path / "points.parquet").write_bytes((EXTRA / "h100-local-r3" / "points.parquet").read_bytes())
    code, out, err = cli("calibrate", "--against", LOCAL1, "--own-rate", "--records", str(tmp_path))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("xstage: error: --own-rate(=")
    assert "platform.json" in err


def test_own_rate_warns_where_the_runs_fitted_R_left_its_zero_gap_points(cli):
    perk = str(EXTRA / "h100-pcie-host-pool27-lockq-perk" / "platform.json")
    code, out, _ = cli("calibrate", "--against", perk, "--own-rate", "--records",
                       str(EXTRA / "h100-pcie-host-fresh13-call27c"))
    assert code == 0 and out.count("warning: the run's fitted R is -0.91%") == 1   # one slow point pulled the fit
    code, out, _ = cli("calibrate", "--against", perk, "--own-rate", "--records",
                       str(EXTRA / "h100-pcie-host-fresh11-c27"))
    assert code == 0 and "warning" not in out
    code, js, _ = cli("calibrate", "--against", perk, "--own-rate", "--records",
                      str(EXTRA / "h100-pcie-host-fresh13-call27c"), "--json")
    as_is, own = json.loads(js)
    assert "rate_check" not in as_is and own["rate_check"]["suspect"] is True
    assert own["rate_check"]["median_zero_gap_rate_GBps"] == pytest.approx(52.735, abs=1e-3)


def test_the_rate_check_flags_one_committed_host_folder_and_skips_local():
    from xstage.cli.calib_against import rate_check
    from xstage.records import load_records
    from xstage.sim.platform import load_platform
    flagged = []
    for folder in sorted(p.parent for p in EXTRA.glob("h*-pcie-host-*/points.parquet")):
        if (folder / "platform.json").is_file():
            check = rate_check(load_records(folder / "points.parquet", "point")[0],
                               load_platform(folder / "platform.json").drain_rate_GBps, "host")
            if check and check["suspect"]:
                flagged.append(folder.name)
    assert flagged == ["h100-pcie-host-fresh13-call27c"]
    points = load_records(EXTRA / "h100-local-r3" / "points.parquet", "point")[0]
    assert rate_check(points, 2500.0, "local") is None


def test_own_rate_reads_the_zero_gap_median_by_default_and_the_fit_on_request(cli):
    """call28's rule (session 28): a bare --own-rate takes the median V/period of the folder's zero-gap lockstep
    points, which call27c's one slow point did not pull; --own-rate fit keeps the run's least-squares R."""
    perk = str(EXTRA / "h100-pcie-host-pool27-lockq-perk" / "platform.json")
    folder = str(EXTRA / "h100-pcie-host-fresh13-call27c")
    rows = {}
    for rule in ("", "median", "fit"):
        code, js, err = cli("calibrate", "--against", perk, "--records", folder, "--json", "--own-rate",
                            *([rule] if rule else []))
        assert code == 0, err
        rows[rule] = json.loads(js)[1]
    assert rows[""] == rows["median"] and rows["median"]["drain_rate_rule"] == "median"
    assert rows["median"]["drain_rate_GBps"] == pytest.approx(52.735, abs=1e-3)
    assert rows["fit"]["drain_rate_GBps"] == pytest.approx(52.256, abs=1e-3) and rows["fit"]["drain_rate_rule"] == "fit"
    med, fit = (rows[k]["every_point"]["p90_rel_err_T_iss"] for k in ("median", "fit"))
    assert med == pytest.approx(0.2007, abs=5e-4) and fit == pytest.approx(0.4902, abs=5e-4)   # call28's doc figures
    code, out, _ = cli("calibrate", "--against", perk, "--records", folder, "--own-rate")
    assert "this row uses the median" in out


def test_own_rate_off_host_falls_back_to_the_fit_and_says_so(cli):
    code, js, err = cli("calibrate", "--against", LOCAL1, "--own-rate", "--records", str(EXTRA / "h100-local-r3"),
                        "--json")
    assert code == 0, err
    own = json.loads(js)[1]
    assert own["drain_rate_rule"].startswith("fit") and own["drain_rate_from"].endswith("platform.json")


def test_an_unknown_own_rate_rule_is_refused_with_status_2(cli):
    code, out, err = cli("calibrate", "--against", LOCAL1, "--own-rate", "mean", "--records",
                         str(EXTRA / "h100-local-r3"))
    assert code == 2 and out == "" and "--own-rate" in err and "mean" in err
