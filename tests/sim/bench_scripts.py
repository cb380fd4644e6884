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
