"""Interrupted runs: SIGINT, SIGTERM or SIGKILL of a `sweep --jobs 2` leaves no output and no workers."""

import signal
import subprocess
import sys
import time

import pytest

from xstage.sim.workloads.catalog import moe_configs

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and PDEATHSIG: Linux")


def _sigint_at_its_default():
    """In the child before exec: SIGINT at its default action. A shell without job control starts its background
    commands with SIGINT ignored, and an ignored signal stays ignored across exec (the CLI rightly keeps it so), which
    would leave the SIGINT case waiting out its timeout (session 28: a README test run started with `&`)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_sweep(tmp_path):
    out = tmp_path / "moe.parquet"
    # The catalog ten times over (about 100 s of two workers' time unloaded): a loaded CI machine once finished the
    # catalog alone before the signal arrived, and the run exited 0; a run that stops only after its queue cannot
    # end inside the 30 s the signal tests give it, even on an idle machine.
    names = [c.name for c in moe_configs()] * 10
    proc = subprocess.Popen([sys.executable, "-m", "xstage.cli", "sweep", "moe", "--jobs", "2", "--out", str(out),
                             "--configs", *names],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            preexec_fn=_sigint_at_its_default)
    parent = psutil.Process(proc.pid)
    for _ in range(300):  # the workers start at the first submitted configuration
        workers = parent.children()
        if len(workers) >= 2:
            time.sleep(0.5)  # let them start working
            return proc, out, parent.children()
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"sweep started no workers: {proc.communicate()}")


def _gone(workers, within_s=10.0) -> bool:
    _, alive = psutil.wait_procs(workers, timeout=within_s)
    return not alive


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_workers_and_writes_nothing(tmp_path, sig, status):
    proc, out, workers = _start_sweep(tmp_path)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)  # at once: not after the queued configurations (~100 s of work)
    assert proc.returncode == status
    assert err.strip().splitlines()[-1] in ("xstage: interrupted", "xstage: terminated")
    assert "Traceback" not in err
    assert _gone(workers)
    assert list(tmp_path.iterdir()) == [], "no partial or temporary output"


def test_sigkill_of_the_parent_takes_the_workers_down(tmp_path):
    proc, out, workers = _start_sweep(tmp_path)
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone(workers)
    assert not out.exists()
