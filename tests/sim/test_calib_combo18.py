"""``benchmarks/calib_combo18.py`` (session 18): the post hoc score read back under its rule
(data/calibration-extra/combo18-criterion.md), and the pre-registered fresh score (fresh15-preregistration.md) run on
a ``--grid fresh15`` folder the product's own command wrote on the simulator; an existing ``--json`` and a folder
without points are refused before any fit."""
import json

import pytest

from xstage.cli import main

from .bench_scripts import load_script

c18 = load_script("calib_combo18")
PLATFORM = c18.EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json"


def test_the_committed_score_reads_back_from_its_rows():
    s = json.loads((c18.EXTRA / "combo18-posthoc.json").read_text())
    rows = s["rows"]
    assert s["post_hoc"] is True and len(rows) == len(c18.FOLDERS) * 5 * len(c18.CANDIDATES)
    for r in rows:
        assert r["all_four"] == (r["heldout_median_rel_err_T_iss"] <= 0.05 and r["heldout_p90_rel_err_T_iss"] <= 0.15
                                 and r["heldout_median_rel_err_period"] <= 0.05
                                 and r["heldout_p90_rel_err_period"] <= 0.15)
    assert s["decision"] == c18.decide(rows) and s["decision"]["ready"] is True
    assert s["issue_law"]["store_buffer_bytes"] == 4096.0


def test_the_fresh_score_runs_on_a_fresh15_folder_of_the_product(tmp_path):
    out = tmp_path / "h200-pcie-host-fresh15"
    assert main(["calibrate", "--target", "host", "--sim", str(PLATFORM), "--grid", "fresh15", "--repeat", "2",
                 "--model", "two-stage-lockq", "--split-rule", "bracket", "--no-copy", "--out", str(out),
                 "--quiet"]) == 0
    rows = c18.scan(records=out, log=lambda *a, **k: None)
    assert [r["seed"] for r in rows if r["candidate"] == "combo18"] == [0, 1, 2, 3, 4]
    d = c18.score_fresh(rows)
    assert d["seeds_met"] == sum(r["all_four"] for r in rows if r["candidate"] == "combo18")
    assert d["verdict"] == ("met" if d["seeds_met"] >= 4 else "not met")


def test_bad_input_is_one_line_and_exit_2_before_any_fit(tmp_path, capsys):
    taken = tmp_path / "scores.json"
    taken.write_text("{}")
    with pytest.raises(SystemExit) as stop:
        c18.main(["--json", str(taken)])
    assert stop.value.code == 2 and taken.read_text() == "{}"
    with pytest.raises(SystemExit) as stop:
        c18.main(["--records", str(tmp_path / "none"), "--json", str(tmp_path / "new.json")])
    assert stop.value.code == 2 and not (tmp_path / "new.json").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("calib_combo18: error:") for e in err)
