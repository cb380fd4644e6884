"""Loading a script of ``benchmarks/`` as a module in a test (its folder on ``sys.path`` for the scripts it imports)."""

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_script(name: str):
    """``benchmarks/<name>.py`` as a module named ``name``."""
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
