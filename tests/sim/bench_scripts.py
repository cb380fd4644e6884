"""Loading a script of ``benchmarks/`` as a module in a test (its folder on ``sys.path`` for the scripts it imports)."""

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script(name: str, folder: str = "", as_name: str | None = None):
    """``benchmarks/<folder>/<name>.py`` as a module named ``as_name`` (default ``name``); the device scripts are in
    ``folder="gpu"``, and are given another name where a CPU script has theirs (``fa_rule20_gpu``)."""
    where = BENCHMARKS / folder
    sys.path.insert(0, str(where))
    spec = importlib.util.spec_from_file_location(as_name or name, where / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_device_script(tmp_path, script: str, gpu_name: str, *args: str):
    """``bash benchmarks/gpu/<script> ARGS`` on this machine with stubs for ``nvidia-smi`` (it names ``gpu_name``)
    and ``python3`` (it records its arguments in ``python3.calls``, one call per line, and writes nothing else), $OUT
    a fresh folder: (the finished process, the recorded calls, $OUT). For the device scripts' branching only."""
    import os
    import stat
    import subprocess
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    calls = tmp_path / "python3.calls"
    for name, body in (("nvidia-smi", f"echo '{gpu_name}'"), ("python3", f'echo "$*" >> {calls}')):
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod((bin_ / name).stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "OUT": str(out)}
    proc = subprocess.run(["bash", str(BENCHMARKS / "gpu" / script), *args], capture_output=True, text=True, env=env)
    return proc, (calls.read_text().splitlines() if calls.exists() else []), out

