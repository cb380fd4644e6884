"""The core CLI: machine-readable output, and one line + exit status 2 for every bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


MODEL_KEYS = {"T_iss_us", "delta_T_iss_us", "G_star_us", "period_us", "q_peak0_MiB", "T_iss_iso_us",
              "rate_bound_ok", "capacity_bound_ok"}


def test_model_json(cli):
    code, out, _ = cli("model", "--platform", "paper-b200", "--producers", "148",
                       "--bytes-per-producer", "32KiB", "--gap-us", "2", "--json")
    d = json.loads(out)
    assert code == 0 and MODEL_KEYS <= set(d)
    assert d["G_star_us"] == pytest.approx(6.0038, abs=1e-3)
    assert d["rate_bound_ok"] is False and d["capacity_bound_ok"] is True


def test_model_fa_json(cli):
    code, out, _ = cli("model", "fa", "--platform", "paper-b200", "--producers", "148", "--block-m", "128",
                       "--block-n", "128", "--head-dim", "128", "--out-bytes", "2", "--sigma-us", "0.79", "--json")
    d = json.loads(out)
    assert code == 0 and d["M_ub_star_tokens"] == 1024 and d["burst_MiB"] == pytest.approx(4.625)
    assert d["capacity_bound_ok"] is True and d["G_star_us"] == pytest.approx(6.0, abs=0.01)


def test_sim_bursts_json_and_records(cli, tmp_path):
    out_file = tmp_path / "b.parquet"
    code, out, _ = cli("sim", "bursts", "--platform", "paper-b200", "-K", "132", "-B", "32KiB", "-G", "2",
                       "--bursts", "40", "--out", str(out_file), "--json")
    d = json.loads(out)
    assert code == 0 and {"T_iss_us", "period_us", "peak_queue_MiB", "bursts_per_s"} <= set(d)
    assert d["T_iss_us"] == pytest.approx(d["model_T_iss_us"], rel=1e-6)
    from xstage.records import load_records
    frame, meta = load_records(out_file, "burst")
    assert len(frame) == 132 * 40 and meta["platform_hash"]
    code, _, err = cli("sim", "bursts", "--platform", "paper-b200", "-K", "2", "-B", "1KiB",
                       "--out", str(out_file))
    assert code == 2 and "already exists" in err  # measured or simulated data is never silently overwritten


@pytest.mark.parametrize("argv,field", [
    (["model", "-p", "paper-b200", "-K", "0", "-B", "32KiB"], "producers(='0')"),
    (["model", "-p", "paper-b200", "-K", "149", "-B", "32KiB"], "producers(=149)"),
    (["model", "-p", "paper-b200", "-K", "8", "-B", "-5"], "bytes_per_producer(='-5')"),
    (["model", "-p", "paper-b200", "-K", "8", "-B", "32KiBB"], "bytes_per_producer(='32KiBB')"),
    (["model", "-p", "paper-b200", "-K", "8", "-B", "1KiB", "-G", "-1"], "gap_us(='-1')"),
    (["model", "-p", "nope", "-K", "8", "-B", "1KiB"], "platform(='nope')"),
    (["model", "-p", "paper-b200", "-K", "8"], "--bytes-per-producer(=None)"),
    (["model", "fa", "-p", "paper-b200", "-K", "8", "--head-dim", "0"], "head-dim(='0')"),
    (["model", "fa", "-p", "paper-b200", "-K", "8", "--sigma-us", "fast"], "sigma_us(='fast')"),
    (["sim", "bursts", "-p", "paper-b200", "-K", "8", "-B", "1KiB", "--mode", "burst"], "mode(='burst')"),
    (["sim", "bursts", "-p", "paper-b200", "-K", "8", "-B", "1KiB", "--bursts", "1"], "bursts(='1')"),
    (["sim", "bursts", "-p", "paper-b200", "-K", "8", "-B", "1KiB", "--queue", "magic"], "queue(='magic')"),
])
def test_bad_input_is_one_line_exit_2(cli, argv, field):
    code, out, err = cli(*argv)
    assert code == 2
    assert err.count("\n") == 1 and field in err and "Traceback" not in err


def test_bad_platform_files(cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 7}')
    code, _, err = cli("model", "-p", str(bad), "-K", "8", "-B", "1KiB")
    assert code == 2 and "schema_version(=7)" in err and err.count("\n") == 1
    bad.write_text("{truncated")
    code, _, err = cli("model", "-p", str(bad), "-K", "8", "-B", "1KiB")
    assert code == 2 and "not valid JSON" in err


def test_console_script_usage_error_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "xstage.cli", "model", "--no-such-flag"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_help_lists_subcommands():
    proc = subprocess.run([sys.executable, "-m", "xstage.cli", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for name in ("model", "sim", "demo", "sweep", "calibrate", "compare", "dashboard", "results"):
        assert name in proc.stdout


def test_calibrate_help_names_every_grid_and_model(cli):
    from xstage.hw.calib.grids import GRIDS, describe_grid
    from xstage.sim.platform_fit import MODELS
    code, out, _ = cli("calibrate", "--help")
    out = " ".join(out.split())                          # argparse wraps lines
    assert code == 0
    assert "--grid {" + ",".join(GRIDS) + "}" in out and "--model {" + ",".join(MODELS) + "}" in out
    assert describe_grid("fresh5") == ("fresh5 (K 7,30,76,124 x B 9,18,30,68,200 KiB; 4 gap sweeps, 0 also "
                                       "free-running; isolated sweep at every K on 7 sizes)")


def test_demo_refuses_a_folder_it_did_not_write(cli, tmp_path):
    (tmp_path / "keep.txt").write_text("someone's measurements")
    code, _, err = cli("demo", "--out", str(tmp_path), "--no-dashboards")
    assert code == 2 and "not written by `xstage demo`" in err
    assert (tmp_path / "keep.txt").read_text() == "someone's measurements"


@pytest.mark.parametrize("kind,key", [("calibration", "R_GBps"), ("attention", "hiding_ratio"),
                                      ("moe", "sign_agreement_with_sim")])
def test_results_work_without_gpu_libraries(kind, key):
    """`xstage results` reads committed records; it must not need torch, triton or cupy."""
    code = ("import sys; sys.modules.update(torch=None, triton=None, cupy=None); from xstage.cli import main; "
            f"sys.exit(main(['results', '{kind}', '--platform', 'h200-pcie-host', '--json']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    row = data[0] if isinstance(data, list) else data
    assert key in row


def test_piped_into_head_is_quiet():
    """`xstage ... | head -2`: no BrokenPipeError traceback."""
    proc = subprocess.run(f"{sys.executable} -m xstage.cli attention layout --tiles --seq-len 65536 | head -2",
                          shell=True, capture_output=True, text=True)
    assert proc.stdout.count("\n") == 2 and proc.stderr == ""


def test_output_below_a_file_is_one_line(cli, tmp_path):
    (tmp_path / "f").write_text("x")
    code, _, err = cli("schedule", "export", "--schedule", "fa_qloop", "--heads", "2", "--seq-len", "1024",
                       "--out", str(tmp_path / "f" / "s.npz"))
    assert code == 2 and err.count("\n") == 1 and str(tmp_path / "f") in err


def test_write_failure_is_one_line_naming_the_path(cli, tmp_path, monkeypatch):
    """A full or read-only disk while writing: one line with the path, exit 2, no temporary file left."""
    import errno

    from xstage.sim.schedules import Schedule

    def full(self, path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(Schedule, "save", full)
    code, _, err = cli("schedule", "export", "--schedule", "fa_qloop", "--heads", "2", "--seq-len", "1024",
                       "--out", str(tmp_path / "s.npz"))
    assert code == 2 and err.count("\n") == 1 and "No space left on device" in err and str(tmp_path) in err
    assert list(tmp_path.iterdir()) == []


def test_input_error_in_a_worker_arrives_as_itself(cli, tmp_path, monkeypatch):
    """`sweep --jobs 2`: an input error raised in a worker process is one line, not BrokenProcessPool."""
    code, _, err = cli("sweep", "fa", "--jobs", "2", "--platform", "paper-b200", "--out",
                       str(tmp_path / "x.parquet"), "--configs", "DiT-MoE")
    assert code == 2 and "only applies to sweep moe" in err
    from concurrent.futures import BrokenExecutor

    from xstage.errors import InputError
    from xstage.sim.pool import WorkerPool

    with WorkerPool(2) as pool:
        fut = pool.submit(_raise_input_error)
        with pytest.raises(InputError) as caught:
            fut.result()
    assert not isinstance(caught.value, BrokenExecutor) and str(caught.value) == "lead(=0) deadlocks"


def _raise_input_error():
    from xstage.errors import InputError
    raise InputError("lead", 0, "deadlocks")


def test_demo_never_replaces_without_overwrite_nor_deletes_user_files(cli, tmp_path):
    out = tmp_path / "demo"
    assert cli("demo", "--out", str(out), "--no-dashboards", "--quiet")[0] == 0
    assert (out / "summary.json").is_file() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    code, _, err = cli("demo", "--out", str(out), "--no-dashboards")
    assert code == 2 and "--overwrite" in err
    (out / "paper-b200" / "notes.txt").write_text("mine")
    code, _, err = cli("demo", "--out", str(out), "--no-dashboards", "--overwrite")
    assert code == 2 and "notes.txt" in err and (out / "paper-b200" / "notes.txt").read_text() == "mine"
    (out / "paper-b200" / "notes.txt").unlink()
    assert cli("demo", "--out", str(out), "--no-dashboards", "--overwrite", "-q")[0] == 0


def test_interrupted_demo_leaves_no_folder(cli, tmp_path, monkeypatch):
    import xstage.demo as demo  # the computation the CLI (xstage.cli.demo) calls

    def stop(platform):
        raise KeyboardInterrupt
    monkeypatch.setattr(demo, "burst_sweeps", stop)
    code, _, err = cli("demo", "--out", str(tmp_path / "demo"), "--no-dashboards", "--quiet")
    assert code == 130 and err == "xstage: interrupted\n" and list(tmp_path.iterdir()) == []


def test_sim_bursts_csv_never_clobbers_its_meta(cli, tmp_path):
    (tmp_path / "b.meta.json").write_text("{}")
    code, _, err = cli("sim", "bursts", "-p", "paper-b200", "-K", "2", "-B", "1KiB", "-n", "4",
                       "--out", str(tmp_path / "b.csv"))
    assert code == 2 and "b.meta.json" in err and (tmp_path / "b.meta.json").read_text() == "{}"
    assert not (tmp_path / "b.csv").exists()


@pytest.mark.parametrize("argv,needle", [
    (["model", "-K", "8", "-B", "0.4"], "bytes_per_producer(='0.4') must be a whole number of bytes"),
    (["model", "-K", "8", "-B", "1e400"], "bytes_per_producer(='1e400')"),
    (["advise", "--config", "DiT-MoE/w8a8/skewed/S", "--num-sms", "1"], "num_sms(='1') must be >= 2"),
    (["replay", "moe", "--config", "DiT-MoE/w8a8/skewed/S", "--l1-us", "inf"], "--l1-us(='inf') must be finite"),
    (["calibrate", "--sim", "paper-b200", "--target", "host", "--out", "x", "--quick", "--trials", "0"],
     "--trials(=0)"),
    (["calibrate", "--sim", "paper-b200", "--target", "host", "--out", "x", "--gap-fractions", "-1"],
     "--gap-fractions(='-1')"),
    (["sweep", "moe", "--jobs", "0", "--out", "x.parquet"], "--jobs(='0')"),
])
def test_issue_examples_are_refused(cli, argv, needle):
    code, _, err = cli(*argv)
    assert code == 2 and err.count("\n") == 1 and needle in err, err


def test_platform_file_with_null_field(cli, tmp_path):
    d = json.loads((Path(__file__).resolve().parents[2] / "sim" / "platforms" / "paper-b200.json").read_text())
    for field, value in (("tensor_TFLOPs", None), ("drain_rate_GBps", "717"), ("capacity_points", [[1.5, 9]])):
        bad = tmp_path / f"{field}.json"
        bad.write_text(json.dumps({**d, field: value}))
        code, _, err = cli("model", "-p", str(bad), "-K", "8", "-B", "1KiB")
        assert code == 2 and err.count("\n") == 1 and field in err, err
