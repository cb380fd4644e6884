"""``xstage calibrate --repeat N`` stopped part way (Ctrl-C, SIGTERM, a runner error): every run measured before the
stop is kept in OUT/partial/run-<i> as soon as it is measured, and the command ends on one stderr line naming the
runs kept, where, and the refit that fits them (``--refit --records run-1 --median-with run-2 ...``); that refit
gives the fit of the same points. Exit status 130 for Ctrl-C, 143 for SIGTERM, 1 for a runner error; no traceback,
no final record. A finished sweep removes partial/; a new sweep into a folder holding one refuses (exit 2)."""

import json
import os
import shlex

import pandas as pd
import pytest

from xstage.cli import main
from xstage.cli.exits import Terminated, call
from xstage.hw.calib import calibrate, repeat
from xstage.records import load_records
from xstage.sim import calib_runner

SWEEP = ["calibrate", "--target", "host", "--sim", "h200-pcie-host", "--quick", "--no-copy"]
SAME = ("split", "heldout_n_pairs", "R_GBps", "T_iss0_us_at_32KiB", "Q_MiB", "t_fixed_us", "model", "n_points",
        "heldout_p90_rel_err_T_iss", "heldout_median_rel_err_period", "fit_p90_rel_err_T_iss", "fit_n_points")


@pytest.fixture
def runner(monkeypatch):
    """The simulator runner the CLI builds for --sim, counting its runs (``calls``) and raising ``error`` at run
    ``stop_at`` (1, 2, ...)."""
    class Stopping(calib_runner.SimRunner):
        calls, stop_at, error = 0, None, None

        def run(self, spec):
            Stopping.calls += 1
            if Stopping.calls == Stopping.stop_at:
                raise Stopping.error
            return super().run(spec)

    monkeypatch.setattr(calib_runner, "SimRunner", Stopping)
    return Stopping


def _sweep(capsys, out, *extra, argv=None):
    """``xstage calibrate`` as the command line runs it (``exits.call``): (status, summary or None, stderr lines)."""
    code = call(lambda: main((argv or SWEEP + ["--out", str(out)]) + ["--json", "--quiet", *extra]))
    got = capsys.readouterr()
    return code, (json.loads(got.out) if code == 0 else None), got.err.strip().splitlines()


def _fit_command(line):
    """The refit the stop line names, as arguments for ``main``."""
    argv = shlex.split(line.split("; to fit what was kept: ", 1)[1])
    assert argv[:2] == ["xstage", "calibrate"], argv
    return argv[1:]


def _same_fit(a: dict, b: dict):
    for k in SAME:
        assert a[k] == (pytest.approx(b[k], rel=1e-12, abs=1e-15) if isinstance(b[k], float) else b[k]), k


def _per_run(runner, capsys, out):
    """One run of the grid (its summary), and how many configurations it measures."""
    code, summary, _ = _sweep(capsys, out)
    assert code == 0
    n, runner.calls = runner.calls, 0
    return summary, n


def test_ctrl_c_in_run_2_of_3_keeps_run_1_and_names_the_refit_that_fits_it(tmp_path, capsys, runner):
    one, n = _per_run(runner, capsys, tmp_path / "one")           # the points run 1 of 3 measures too
    runner.stop_at, runner.error = n + n // 2, KeyboardInterrupt()
    out = tmp_path / "o"
    code, _, err = _sweep(capsys, out, "--repeat", "3")
    assert code == 130 and runner.calls == n + n // 2
    assert err == [f"xstage: interrupted in run 2 of 3: kept run 1 in {out / 'partial'}; to fit what was kept: "
                   f"xstage calibrate --refit --records {out / 'partial' / 'run-1'} --name gpu-pcie-host --out {out}"]
    # what is kept: run 1, whole, and nothing else (no final record, no temporary folder)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "partial", "partial/run-1", "partial/run-1/bursts.parquet", "partial/run-1/points.parquet"]
    points, meta = load_records(out / "partial" / "run-1" / "points.parquet", "point")
    pd.testing.assert_frame_equal(points, pd.read_parquet(tmp_path / "one" / "points.parquet"))   # split included
    assert meta["repeat_run"] == {"run": 1, "of": 3} and meta["config"]["repeat"] == 1   # a folder of one run
    assert (pd.read_parquet(out / "partial" / "run-1" / "bursts.parquet")["repeat"] == 1).all()
    # a new sweep into the folder refuses: the kept run is not replaced silently
    before = (out / "partial" / "run-1" / "points.parquet").read_bytes()
    code, _, again = _sweep(capsys, out, "--repeat", "3")
    assert code == 2 and len(again) == 1 and again[0].startswith(f"xstage: error: --out(={str(out)!r}) holds "
                                                                 "partial/"), again
    assert (out / "partial" / "run-1" / "points.parquet").read_bytes() == before
    # the named refit fits what was kept into OUT: the fit of the same points (the one-run sweep's)
    code, kept, _ = _sweep(capsys, None, argv=_fit_command(err[0]))
    assert code == 0
    _same_fit(kept, one)
    assert json.loads((out / "platform.json").read_text())["name"] == "gpu-pcie-host"
    assert (out / "partial" / "run-1" / "points.parquet").read_bytes() == before      # its source, left as it was


@pytest.mark.parametrize("error,status,head", [
    (RuntimeError("the runner broke\nsecond line"), 1, "xstage: error: RuntimeError: the runner broke (in run 3 of 3)"),
    (Terminated(), 143, "xstage: terminated in run 3 of 3"),
])
def test_a_stop_in_run_3_keeps_runs_1_and_2_and_their_refit_is_the_median_of_two(tmp_path, capsys, runner, error,
                                                                                   status, head):
    _, n = _per_run(runner, capsys, tmp_path / "one")
    code, two, _ = _sweep(capsys, tmp_path / "two", "--repeat", "2")   # the fit of two runs measured in one command
    assert code == 0 and runner.calls == 2 * n
    runner.calls, runner.stop_at, runner.error = 0, 2 * n + 1, error
    out = tmp_path / "o"
    code, _, err = _sweep(capsys, out, "--repeat", "3")
    assert code == status and len(err) == 1, err
    part = out / "partial"
    assert err[0] == (f"{head}: kept runs 1-2 in {part}; to fit what was kept: xstage calibrate --refit --records "
                      f"{part / 'run-1'} --median-with {part / 'run-2'} --name gpu-pcie-host --out {out}")
    assert sorted(p.name for p in part.iterdir()) == ["run-1", "run-2"] and sorted(out.iterdir()) == [part]
    code, kept, _ = _sweep(capsys, None, argv=_fit_command(err[0]))
    assert code == 0 and kept["repeat"] == 2
    every = kept["repeat_points"]["in_every_run"]
    assert every == two["repeat_points"]["in_every_run"] == two["repeat_points"]["points"]
    _same_fit(kept, two)
    runs = pd.read_parquet(out / "points-runs.parquet")
    assert runs.groupby("repeat").size().tolist() == [len(pd.read_parquet(out / "points.parquet"))] * 2


def test_a_stop_in_run_1_keeps_nothing_and_ends_as_before(tmp_path, capsys, runner):
    runner.stop_at, runner.error = 3, KeyboardInterrupt()
    out = tmp_path / "o"
    code, _, err = _sweep(capsys, out, "--repeat", "3")
    assert (code, err) == (130, ["xstage: interrupted"]) and not out.exists()


def test_a_finished_sweep_removes_partial_and_overwrite_replaces_a_kept_one(tmp_path, capsys, runner):
    _, n = _per_run(runner, capsys, tmp_path / "one")
    runner.stop_at, runner.error = n + 1, KeyboardInterrupt()
    out = tmp_path / "o"
    assert _sweep(capsys, out, "--repeat", "2")[0] == 130 and (out / "partial" / "run-1").is_dir()
    runner.calls, runner.stop_at = 0, None
    code, summary, _ = _sweep(capsys, out, "--repeat", "2", "--overwrite")
    assert code == 0 and summary["repeat"] == 2 and runner.calls == 2 * n
    assert not (out / "partial").exists() and (out / "points-runs.parquet").is_file()


def test_the_moved_names_are_calibrates_too():
    assert calibrate.sweeps is repeat.sweeps and calibrate.median_of is repeat.median_of
    assert calibrate.store_buffer_at_bound is repeat.store_buffer_at_bound and calibrate.RunsKept is repeat.RunsKept


def test_a_stop_in_the_fit_keeps_every_run_and_the_refit_replaces_what_the_fit_wrote(tmp_path, capsys, runner,
                                                                                       monkeypatch):
    def half_written(points, bursts, copy, meta, out, **kw):   # the fit stopped after writing one of its files
        (out / "points.parquet").write_bytes(b"not records")
        raise KeyboardInterrupt

    real = calibrate.finish
    monkeypatch.setattr(calibrate, "finish", half_written)
    out = tmp_path / "o"
    code, _, err = _sweep(capsys, out, "--repeat", "2")
    part = out / "partial"
    assert code == 130 and err == [
        f"xstage: interrupted after run 2 of 2: kept runs 1-2 in {part}; to fit what was kept: xstage calibrate "
        f"--refit --records {part / 'run-1'} --median-with {part / 'run-2'} --name gpu-pcie-host --out {out} "
        "--overwrite"]
    monkeypatch.setattr(calibrate, "finish", real)
    code, kept, _ = _sweep(capsys, None, argv=_fit_command(err[0]))
    assert code == 0 and kept["repeat"] == 2 and (pd.read_parquet(out / "points.parquet")["n_runs"] == 2).all()


def test_a_stop_while_the_files_are_written_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """``finish`` writes every file into a hidden folder first and moves them in only when all are written: an
    interrupt half way (here: while platform.json is written, after the parquet files) leaves no new file, no mix
    of old and new, and no hidden folder behind."""
    from xstage.hw.calib import calibrate
    from xstage.records import platform as platform_records

    out = tmp_path / "calib"
    out.mkdir()
    (out / "summary.json").write_text("old\n")

    def stop(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(platform_records, "save_platform", stop)
    with pytest.raises(KeyboardInterrupt):
        with calibrate.staged_files(out, overwrite=True) as stage:
            (stage / "points.parquet").write_bytes(b"new")
            platform_records.save_platform(None, stage / "platform.json")
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]
    assert (out / "summary.json").read_text() == "old\n"


def test_staged_files_refuse_an_existing_file_before_moving_any(tmp_path):
    from xstage.errors import InputError
    from xstage.hw.calib import calibrate

    out = tmp_path / "calib"
    out.mkdir()
    (out / "summary.json").write_text("old\n")
    with pytest.raises(InputError, match="summary.json"):
        with calibrate.staged_files(out, overwrite=False) as stage:
            (stage / "points.parquet").write_bytes(b"new")
            (stage / "summary.json").write_text("new\n")
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"] and (out / "summary.json").read_text() == "old\n"
    with calibrate.staged_files(out, overwrite=True) as stage:
        (stage / "points.parquet").write_bytes(b"new")
        (stage / "summary.json").write_text("new\n")
    assert sorted(p.name for p in out.iterdir()) == ["points.parquet", "summary.json"]
    assert (out / "summary.json").read_text() == "new\n"


def test_a_stage_left_by_a_killed_fit_is_removed_by_the_next_and_no_other(tmp_path):
    import subprocess
    import sys

    from xstage.hw.calib import calibrate
    from xstage.hw.calib.staged import stale_stages

    out = tmp_path / "calib"
    out.mkdir()
    # a fit killed by SIGKILL while writing: its stage folder stays behind
    code = ("import os, signal, sys; from pathlib import Path; from xstage.hw.calib.staged import staged_files\n"
            "with staged_files(Path(sys.argv[1]), True) as stage:\n"
            "    (stage / 'points.parquet').write_bytes(b'half')\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    killed = subprocess.run([sys.executable, "-c", code, str(out)])
    assert killed.returncode == -9
    left = [p for p in out.iterdir()]
    assert len(left) == 1 and left[0].name.startswith(".finish-") and stale_stages(out) == left
    alive = out / f".finish-{__import__('socket').gethostname()}-{os.getpid()}-abc"   # this process: running
    other = out / ".finish-another-host-1-abc"                                        # another host's
    alive.mkdir()
    other.mkdir()
    assert stale_stages(out) == left
    with calibrate.staged_files(out, overwrite=False) as stage:
        (stage / "summary.json").write_text("new\n")
    assert sorted(p.name for p in out.iterdir()) == sorted([alive.name, other.name, "summary.json"])


def test_a_fit_that_fails_after_a_single_run_keeps_the_run_and_its_refit_is_the_fit(tmp_path, capsys, runner,
                                                                                       monkeypatch):
    """Session 26: two H100 sweeps (fresh4, fresh7) measured, then the fit divided by a zero issue time and the
    measured points were lost. A plain sweep (no --repeat) now keeps its run too, so a failing fit loses nothing."""
    one, _ = _per_run(runner, capsys, tmp_path / "one")

    def broken(*a, **k):
        raise ZeroDivisionError("float division by zero")
    real = calibrate.finish
    monkeypatch.setattr(calibrate, "finish", broken)
    out = tmp_path / "o"
    code, _, err = _sweep(capsys, out)
    part = out / "partial"
    assert code == 1 and err == [
        f"xstage: error: ZeroDivisionError: float division by zero (after run 1 of 1): kept run 1 in {part}; to fit "
        f"what was kept: xstage calibrate --refit --records {part / 'run-1'} --name gpu-pcie-host --out {out}"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "partial", "partial/run-1", "partial/run-1/bursts.parquet", "partial/run-1/points.parquet"]
    monkeypatch.setattr(calibrate, "finish", real)
    code, kept, _ = _sweep(capsys, None, argv=_fit_command(err[0]))
    assert code == 0
    _same_fit(kept, one)


def test_a_finished_single_run_leaves_no_partial_folder(tmp_path, capsys, runner):
    code, _, _ = _sweep(capsys, tmp_path / "o")
    assert code == 0 and not (tmp_path / "o" / "partial").exists() and (tmp_path / "o" / "platform.json").is_file()
