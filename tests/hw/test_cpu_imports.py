"""Everything a CPU path needs imports without the GPU libraries: the layouts, buffers, references, benches
and record builders, and every ``python -m xstage.hw.*`` entry point's ``--help`` and bad-input refusal.
Run in a subprocess where importing torch, triton or cupy fails, whichever of them this machine has."""

import json
import subprocess
import sys

CPU_MODULES = ("xstage.hw.moe.bench", "xstage.hw.moe.dist", "xstage.hw.moe.setup", "xstage.hw.moe.buffers",
               "xstage.hw.moe.refs", "xstage.hw.moe.ep_inputs", "xstage.hw.attention.bench",
               "xstage.hw.attention.dist", "xstage.hw.attention.variants", "xstage.hw.common.timing",
               "xstage.hw.microbench.runner", "xstage.hw.microbench.selftest", "xstage.hw.calib.calibrate",
               "xstage.records.attention", "xstage.records.moe")
ENTRY_POINTS = ("xstage.hw.attention.bench", "xstage.hw.attention.dist", "xstage.hw.moe.bench", "xstage.hw.moe.dist",
                "xstage.hw.microbench.runner")

BLOCKED = r"""
import importlib, json, runpy, sys
for name in ("torch", "triton", "cupy"):
    sys.modules[name] = None          # `import torch` now raises ImportError
for m in MODULES:
    importlib.import_module(m)
out = {}
for m in ENTRY:
    for argv in (["--help"], ["--out", "/tmp/x", "--trials", "zero"]):
        sys.argv = [m, *argv]
        try:
            runpy.run_module(m, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            code = stop.code
        out[f"{m} {argv[0]}"] = code
print("RESULT" + json.dumps(out))
"""


def test_cpu_paths_import_without_gpu_libraries():
    script = f"MODULES = {CPU_MODULES!r}\nENTRY = {ENTRY_POINTS!r}\n" + BLOCKED
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads([x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1][len("RESULT"):])
    for m in ENTRY_POINTS:
        assert codes[f"{m} --help"] == 0
        assert codes[f"{m} --out"] == 2                  # bad input: refused before anything else
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == len(ENTRY_POINTS), proc.stderr    # one line each, no traceback
    assert "Traceback" not in proc.stderr
    assert all("--trials(='zero')" in line or "--trials" in line for line in errors), errors
