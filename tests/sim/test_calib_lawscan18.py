"""``benchmarks/calib_lawscan18.py`` (session 18, post hoc, decides nothing): every law fitted on every point of each
knee folder. The committed record reads back (every law and folder present, its summary what its rows give); one
fit is recomputed to the committed figures; an existing ``--json`` is refused before any fit."""
import json

import pytest

from .bench_scripts import load_script

ls18 = load_script("calib_lawscan18")


def _record():
    return json.loads((ls18.EXTRA / "lawscan18-posthoc.json").read_text())


def test_the_committed_scan_covers_every_law_and_folder_and_its_summary_is_its_rows():
    s = _record()
    rows = s["rows"]
    assert s["post_hoc"] is True and not [r for r in rows if "error" in r]
    assert {(r["law"], r["grid"]) for r in rows} == {(law, g) for law in ls18.LAWS for g in ls18.FOLDERS}
    assert len(rows) == len(ls18.LAWS) * len(ls18.FOLDERS) * 5
    assert s["summary"] == ls18.summary(rows)
    assert not any(v["every_folder"] for v in s["summary"].values())      # the page's answer: no law, even in-sample


def test_one_fit_recomputes_to_the_committed_figures():
    s = _record()
    got = ls18.scan(laws=("two-stage-lockq",), folders=("fresh14",), log=lambda *a, **k: None)
    want = [r for r in s["rows"] if (r["law"], r["grid"]) == ("two-stage-lockq", "fresh14")]
    assert [r["seed"] for r in got] == [r["seed"] for r in want]
    for g, w in zip(got, want):
        for k in ls18.FIGS:
            assert g[f"heldout_{k}"] == pytest.approx(w[f"heldout_{k}"], rel=1e-9)
        assert g["all_four"] == w["all_four"]


def test_an_existing_json_is_one_line_and_exit_2_before_any_fit(tmp_path, capsys):
    taken = tmp_path / "scan.json"
    taken.write_text("{}")
    with pytest.raises(SystemExit) as stop:
        ls18.main(["--json", str(taken)])
    assert stop.value.code == 2 and taken.read_text() == "{}"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "calib_lawscan18: error: --json" in err[0]
