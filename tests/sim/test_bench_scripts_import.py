"""Every analysis script of ``benchmarks/`` imports: a refactor of the shared study helpers (calib_knee10, fa_link_cost,
...) that drops a name a script still imports fails here, not when someone next reproduces a page. Importing runs
nothing: each script's work sits behind ``main()``."""

import ast
import importlib.util

import pytest

from .bench_scripts import BENCHMARKS, load_script

SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py"))
NEEDS = {"attention_overhead": "triton"}   # scripts that import a GPU stack at the top


def _defines_main(name: str) -> bool:
    tree = ast.parse((BENCHMARKS / f"{name}.py").read_text())
    return any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body)


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_imports_and_does_no_work(name, capsys):
    if name in NEEDS and importlib.util.find_spec(NEEDS[name]) is None:
        # without its GPU stack the script cannot import; it still has to parse and keep its work behind main()
        assert _defines_main(name), f"{name} has no main()"
        return
    module = load_script(name)
    assert capsys.readouterr().out == "", f"{name} wrote output on import"
    assert callable(getattr(module, "main", None)), f"{name} has no main()"


def test_the_list_is_the_folder():
    assert len(SCRIPTS) > 60 and "calib_law15" in SCRIPTS and "finite_runs_lockstep" in SCRIPTS
