"""benchmarks/README.md lists every script under benchmarks/ and benchmarks/gpu/ once, and nothing that is not there."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def test_every_benchmark_script_is_listed_once_and_every_listed_one_exists():
    text = (BENCH / "README.md").read_text()
    listed = re.findall(r"^\| `([^`]+)` \|", text, flags=re.M)
    scripts = sorted([p.name for p in BENCH.glob("*.py")] + [f"gpu/{p.name}" for p in (BENCH / "gpu").iterdir()
                                                              if p.is_file()])
    assert sorted(listed) == scripts
    assert len(listed) == len(set(listed))
    for row in re.findall(r"^\| `[^`]+` \| (.*) \|$", text, flags=re.M):
        assert len(row) > 20, row          # each has its line, not an empty cell
