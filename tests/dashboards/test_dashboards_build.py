"""Dashboard pages: every page built offline, "no data yet" notes, large timelines stay small."""

import re

import numpy as np
import pandas as pd
import pytest

from xstage.compare.collect import collect
from xstage.compare.timeline import synthetic_tiles, timeline_frames
from xstage.dashboards.build import build_dashboards
from xstage.dashboards.html import PLOTLY_JS
from xstage.dashboards.page_timeline import timeline_page
from xstage.dashboards.report import markdown_table, report_markdown
from xstage.records import COLUMNS

PAGES = {"index", "calibration-paper-b200", "whatif-paper-b200", "timeline", "spans", "moe", "attention", "compare",
         "heldout"}


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    empty = tmp_path_factory.mktemp("empty-data")
    return collect(empty, ["paper-b200"], quick=True)


@pytest.fixture(scope="module")
def built(collected, tmp_path_factory):
    out = tmp_path_factory.mktemp("dash")
    return build_dashboards(out, collected)


def test_every_page_is_written_offline_with_one_plotly(built):
    folder = built.parent
    assert built.name == "index.html"
    assert {p.stem for p in folder.glob("*.html")} == PAGES
    assert (folder / PLOTLY_JS).stat().st_size > 1_000_000
    for page in folder.glob("*.html"):
        text = page.read_text()
        assert f'<script src="{PLOTLY_JS}"></script>' in text
        assert not re.search(r'src="https?://', text), f"{page.name} loads something from the network"
        assert page.stat().st_size < 3_000_000


def test_user_pages_carry_no_test_probe_and_test_pages_do(built, collected, tmp_path):
    """The probe moves sliders and pans plots on load: only in pages a test asks for."""
    for page in built.parent.glob("*.html"):
        text = page.read_text()
        assert "data-xstage-probe" not in text and "__xstage" not in text, page.name
    probed = build_dashboards(tmp_path / "probed", collected, probe=True)
    for page in probed.parent.glob("*.html"):
        assert "data-xstage-probe" in page.read_text() and "window.__xstage" in page.read_text(), page.name


def test_pages_are_drawn_from_the_frames_saved_beside_them(built, collected):
    from xstage.compare.store import load_frames

    saved = load_frames(built.parent / "frames")
    assert saved["platforms"] == collected["platforms"] and set(saved["timeline"]["sim"]) == set(
        collected["timeline"]["sim"])
    pd.testing.assert_frame_equal(saved["spans"]["table2"], collected["spans"]["table2"])
    assert not list(built.parent.glob(".*"))   # no temporary file or folder left behind


def test_pages_without_records_say_what_to_run(built):
    folder = built.parent
    for name in ("timeline", "spans", "moe", "attention", "compare", "calibration-paper-b200", "heldout"):
        text = folder.joinpath(f"{name}.html").read_text()
        assert 'data-xstage-nodata="1"' in text and "No data yet" in text and "<code>" in text, name
    assert 'data-xstage-nodata="1"' not in folder.joinpath("whatif-paper-b200.html").read_text()


def _dash_records():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("dash_records", Path(__file__).parents[1] / "dash_records.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_measured_records_fill_every_page_and_the_error_table(tmp_path):
    data = _dash_records().write_measured_like(tmp_path / "data", points=True)
    c = collect(data, ["paper-b200"], quick=True)
    experiments = set(c["errors"]["experiment"])
    assert experiments == {"calibration bursts: paper-b200", "MoE kernels", "FlashAttention + A2A", "MoE tiles"}
    assert c["errors"]["median_rel_err"].notna().all()
    calib = c["calibration"]["paper-b200"]   # points.parquet wins over the burst records beside it
    assert calib["params"]["hw source"].iloc[0].startswith("points.parquet") and len(calib["compare"]) == 9
    assert {"hw", "hw fma", "hw free", "sim"} <= set(calib["gap_sweep"]["series"])
    quantities = set(c["errors"].loc[c["errors"]["experiment"].str.startswith("calibration"), "quantity"])
    assert quantities == {"issue time", "period", "issue time (periodic)", "period (periodic)", "issue time (free)",
                          "period (free)", "issue time (isolated)"}
    speed = c["errors"][c["errors"]["quantity"].str.startswith("speedup")]
    assert speed["speedup_sign_agreement"].notna().all()
    assert len(c["attention"]["tiles"]) == 1 and set(c["timeline"]["hw"]) == {"expert_wave", "interleaved"}
    index = build_dashboards(tmp_path / "dash", c)
    for name in ("timeline", "spans", "moe", "attention", "compare", "calibration-paper-b200", "heldout"):
        assert 'data-xstage-nodata="1"' not in index.parent.joinpath(f"{name}.html").read_text(), name
    assert "measured + simulated" in index.read_text()


def test_report_has_a_section_and_tables_for_every_page(collected):
    md = report_markdown(collected)
    for heading in ("## Calibration (Fig. 3 a-d): paper-b200", "## What-if explorer: paper-b200",
                    "## Schedule timeline (Fig. 9)", "## Remote-store spans and stalls (Fig. 10, Table 2)",
                    "## MoE speedups (Fig. 8)", "## FlashAttention + All-to-All (Fig. 11, Table 3)",
                    "## Simulated vs measured", "## Held-out validation of the calibrations"):
        assert heading in md
    assert md.count("|---|") >= 10
    assert "_No measured records yet" in md


def test_markdown_table_formats_cells():
    frame = pd.DataFrame({"a|b": [1.0, 2.5], "ok": [True, False], "x": [np.nan, 1234567.0]})
    assert markdown_table(frame) == ("| a\\|b | ok | x |\n|---|---|---|\n| 1 | yes |  |\n| 2.5 | no | 1234567 |\n")
    assert markdown_table(frame, max_rows=1).endswith("_first 1 of 2 rows_\n")


def test_a_132_sm_by_20000_tile_timeline_stays_small(tmp_path):
    """132 SMs x 20,000 tiles each (2.64 M tiles): aggregated heatmap + a WebGL window, a few MB."""
    sms, per_sm = 132, 20_000
    n = sms * per_sm
    tiles = synthetic_tiles(sms, per_sm)
    assert list(tiles.columns) == COLUMNS["tile"]
    frames = timeline_frames(tiles, drain_rate_GBps=50.0)
    assert frames["tiles"] == n and not frames["gantt_whole"] and len(frames["gantt"]) == 12_000
    assert frames["heatmap"]["sm"].nunique() == sms
    assert frames["heatmap"]["busy"].between(0, 1.0001).all()
    page = timeline_page({"config": "big", "platform": "p", "sim": {"interleaved": frames}, "hw": {}})
    from xstage.dashboards.html import write_page
    path = write_page(page, tmp_path, [("timeline.html", "timeline")])
    size = path.stat().st_size
    assert size < 6_000_000, f"timeline page is {size / 1e6:.1f} MB"
    assert '"type":"scattergl"' in path.read_text() and '"type":"heatmap"' in path.read_text()


def test_dashboard_and_report_commands(collected, tmp_path, monkeypatch, capsys):
    from xstage.cli import main
    from xstage.compare import collect as collect_module

    seen = []

    def fake_collect(data, platforms, quick=False, progress=None):
        seen.append({"data": data, "platforms": platforms, "quick": quick})
        return collected

    monkeypatch.setattr(collect_module, "collect", fake_collect)
    out = tmp_path / "d"
    assert main(["dashboard", "--out", str(out), "--platform", "paper-b200", "--quick"]) == 0
    assert capsys.readouterr().out.strip() == str(out / "index.html")
    assert seen == [{"data": None, "platforms": ["paper-b200"], "quick": True}]
    assert main(["report", "--out", str(tmp_path / "r"), "--data", str(tmp_path)]) == 0
    assert (tmp_path / "r" / "report.md").read_text().startswith("# xstage report")
    assert main(["report", "--out", str(tmp_path / "r2"), "--data", str(tmp_path / "missing")]) == 2
    assert "--data" in capsys.readouterr().err


def test_dashboard_out_is_never_overwritten_unasked_and_replaced_whole(collected, tmp_path, monkeypatch, capsys):
    from xstage.cli import main
    from xstage.compare import collect as collect_module

    calls = []
    monkeypatch.setattr(collect_module, "collect", lambda *a, **k: calls.append(a) or collected)
    out = tmp_path / "d"
    args = ["dashboard", "--out", str(out), "--platform", "paper-b200", "--quick", "--data", str(tmp_path / "data")]
    (tmp_path / "data").mkdir()
    assert main(args) == 0 and len(calls) == 1
    (out / "stale.html").write_text("a page of an older build")
    before = (out / "index.html").read_text()
    capsys.readouterr()
    assert main(args) == 2 and len(calls) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--overwrite" in err and str(out) in err
    assert (out / "stale.html").exists() and (out / "index.html").read_text() == before
    # a rebuild over the same inputs draws the saved frames: nothing is simulated again; stale pages go
    assert main(args + ["--overwrite"]) == 0 and len(calls) == 1
    assert not (out / "stale.html").exists() and (out / "index.html").read_text() == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temporary folder left
    # new records: the frames are computed again
    (tmp_path / "data" / "new.txt").write_text("x")
    assert main(args + ["--overwrite"]) == 0 and len(calls) == 2
    # --frames: draw a saved frames folder into another output, no collect at all
    assert main(["dashboard", "--out", str(tmp_path / "e"), "--frames", str(out / "frames")]) == 0
    assert len(calls) == 2 and (tmp_path / "e" / "index.html").read_text() == before
    assert main(["report", "--out", str(tmp_path / "e"), "--frames", str(out / "frames")]) == 0
    assert main(["report", "--out", str(tmp_path / "e"), "--frames", str(out / "frames")]) == 2
    assert "report.md" in capsys.readouterr().err and len(calls) == 2
    assert main(["dashboard", "--out", str(tmp_path / "f"), "--frames", str(tmp_path)]) == 2
    assert "manifest.json" in capsys.readouterr().err and not (tmp_path / "f").exists()


def test_a_corrupt_record_file_is_named_not_shown_as_no_data(tmp_path, capsys):
    from xstage.cli import main

    data = tmp_path / "data"
    (data / "moe").mkdir(parents=True)
    (data / "moe" / "moe-kernel.parquet").write_bytes(b"PAR1 truncated")
    assert main(["dashboard", "--out", str(tmp_path / "d"), "--data", str(data), "--platform", "paper-b200",
                 "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "moe-kernel.parquet" in err and "Traceback" not in err
    assert not (tmp_path / "d").exists()
