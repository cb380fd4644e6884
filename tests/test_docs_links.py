"""Every relative link in README.md and docs/**/*.md resolves: the file exists and a ``#anchor`` names a heading
of it, by GitHub's anchor rules (github-slugger on the heading's rendered text: lower case; other numbers,
punctuation but ``-`` and ``_``, symbols, controls and separators but the space removed; spaces to ``-``; a repeat
gets ``-1``, ``-2``, ...). Links inside code spans and fenced blocks are not links."""

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(?<!!)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def rendered(text: str) -> str:
    """A heading's text as GitHub renders it: link text only, no code backticks, no emphasis markers."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "")
    return re.sub(r"(\*\*|\*)(.+?)\1", r"\2", text).strip()


def slug(text: str) -> str:
    out = []
    for ch in rendered(text).lower():
        cat = unicodedata.category(ch)
        if ch in " -_" or ch.isalpha() or (cat[0] in "LMN" and cat != "No"):
            out.append("-" if ch == " " else ch)
    return "".join(out)


def _lines_outside_fences(path: Path):
    fence = False
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield i, line


def anchors(path: Path) -> set:
    out, count = set(), {}
    for _, line in _lines_outside_fences(path):
        m = HEADING.match(line)
        if m:
            base = slug(m.group(2))
            s, n = base, count.get(base, 0)
            while s in out:
                n += 1
                s = f"{base}-{n}"
            count[base] = n
            out.add(s)
    return out


def broken_links(root: Path) -> list:
    bad, cache = [], {}
    for f in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for i, line in _lines_outside_fences(f):
            for m in LINK.finditer(re.sub(r"`[^`]*`", lambda c: " " * len(c.group(0)), line)):
                url = m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", url):
                    continue                                   # http:, mailto:, ...
                target, _, frag = url.partition("#")
                path = (f.parent / target).resolve() if target else f
                where = f"{f.relative_to(root)}:{i}"
                if not path.exists():
                    bad.append(f"{where}: no file {target}")
                elif frag and (path.suffix != ".md" or frag not in cache.setdefault(path, anchors(path))):
                    bad.append(f"{where}: no heading #{frag} in {path.relative_to(root)}")
    return bad


def test_slug_follows_githubs_rules():
    assert slug("Not done / limits") == "not-done--limits"
    assert slug("W8A8 (`hw/moe/w8a8.py`)") == "w8a8-hwmoew8a8py"
    assert slug("The seven configurations under 0.9× quack") == "the-seven-configurations-under-09-quack"
    assert slug("Peer patterns: one sender → the next rank") == "peer-patterns-one-sender--the-next-rank"
    assert slug("Results (µs, run1 / rep)") == "results-µs-run1--rep"
    assert slug("`early_rows` + prefetch, **held out**") == "early_rows--prefetch-held-out"
    assert slug("Measurement (§5.3)") == "measurement-53"


def test_repeated_headings_get_numbered_anchors(tmp_path):
    (tmp_path / "a.md").write_text("# A\n## Variants\n```\n## Not a heading\n```\n### Variants\n## Variants\n")
    assert anchors(tmp_path / "a.md") == {"a", "variants", "variants-1", "variants-2"}


def test_a_broken_file_or_anchor_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("[ok](docs/b.md#two) [gone](docs/c.md) `[code](docs/c.md)`\n")
    (tmp_path / "docs" / "b.md").write_text("# One\n## Two\n[self](#one) [bad](#three) [up](../README.md)\n")
    assert broken_links(tmp_path) == ["README.md:1: no file docs/c.md", "docs/b.md:3: no heading #three in docs/b.md"]


def test_every_relative_link_in_the_docs_resolves():
    assert broken_links(ROOT) == []
