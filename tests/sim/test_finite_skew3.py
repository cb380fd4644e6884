"""The finite kernel's own skew + one span law (benchmarks/finite_skew3.py, session 12, skew16): the span law fit,
the span-law platform, and the committed record's figures recomputed from the committed records and its own rows."""

import json

import numpy as np
import pandas as pd
import pytest

from xstage.paths import data_dir
from xstage.sim.platform import Platform

from .bench_scripts import load_script

EXTRA = data_dir() / "calibration-extra"
RECORD = EXTRA / "skew16-posthoc" / "posthoc.json"


def test_span_law_recovers_a_line_with_a_buffer():
    fs3 = load_script("finite_skew3")
    B = np.array([2048, 4096, 8192, 16384, 24576] * 3, float)
    T = 0.16 + np.maximum(B - 4096, 0) / 64e3
    law = fs3.span_law(pd.DataFrame({"bytes_per_producer": B, "span_us": T}))
    assert law["store_buffer_bytes"] == 4096
    assert law["t_fixed_us"] == pytest.approx(0.16, abs=1e-9)
    assert law["producer_issue_GBps"] == pytest.approx(64.0, rel=1e-9)
    assert fs3.span_us(law, 10240) == pytest.approx(0.16 + 6144 / 64e3)


def test_span_platform_gives_probe_plus_span_below_the_knee():
    fs3 = load_script("finite_skew3")
    committed = json.loads((EXTRA / "h200-local-wide-two-stage-gated" / "platform.json").read_text())
    law = {"t_fixed_us": 0.16, "producer_issue_GBps": 64.0, "store_buffer_bytes": 4096.0}
    d = fs3.span_platform(committed, law)
    assert "injection_GBps" not in d and d["start_skew_us"] == 0.0
    assert d["capacity_relax_GBps"] == committed["capacity_relax_GBps"]
    plat = Platform.from_dict(d | {"start_skew_points": [[12, 0.256]]})
    assert plat.issue_time0_us(12, 6144) == pytest.approx(0.256 + 0.16 + 2048 / 64e3)


def test_write_refuses_an_existing_record(tmp_path):
    fs3 = load_script("finite_skew3")
    dest = tmp_path / "r.json"
    fs3._write(dest, {"a": 1})
    with pytest.raises(FileExistsError):
        fs3._write(dest, {"a": 2})
    assert json.loads(dest.read_text()) == {"a": 1} and not (tmp_path / "r.json.tmp").exists()
    assert fs3.main(["posthoc", str(tmp_path)]) == 2


def test_recorded_span_laws_follow_from_the_wide_grids():
    fs3 = load_script("finite_skew3")
    rec = json.loads(RECORD.read_text())
    for target, folder in fs3.WIDE.items():
        law = fs3.span_law(fs3.grid_span(EXTRA / folder))
        for k in ("t_fixed_us", "producer_issue_GBps", "store_buffer_bytes"):
            assert law[k] == pytest.approx(rec["span_laws"][target][k], rel=1e-12)
    assert rec["span_laws"]["host"]["t_fixed_us"] == pytest.approx(0.16121, abs=5e-6)
    assert rec["span_laws"]["local"]["producer_issue_GBps"] == pytest.approx(64.247, abs=5e-4)


def test_recorded_skew_of_one_run_follows_from_its_bursts():
    fs = load_script("finite_skew")
    rec = json.loads(RECORD.read_text())
    row = next(r for r in rec["runs"] if r["target"] == "local" and r["K"] == 12 and r["B"] == 6144
               and r["measurement"] == "lockstep-repeat-6406bd8-r1")
    m = fs.skews(EXTRA / "lockstep-repeat-6406bd8-r1").set_index(["target", "K", "B", "n"])
    assert m.loc[("local", 12, 6144, 128), "skew_us"] == pytest.approx(row["skew_meas_us"]) == pytest.approx(0.272)


def test_committed_verdict_follows_from_its_rows():
    rec = json.loads(RECORD.read_text())
    f = pd.DataFrame(rec["runs"])
    f = f[f["reproducible"]]
    hit = lambda p, m: (p - m).abs() / m <= 0.10       # noqa: E731
    for target, s in rec["summary"].items():
        g = f[f["target"] == target]
        for lab in ("pred", "B", "perfect"):
            assert int(hit(g[f"T_iss_{lab}_us"], g["T_iss_meas_us"]).sum()) == s["hits_s9_s10"][lab]
        s10 = g[g["measurement"].str.startswith("lockstep-repeat")]
        a = sum(int(hit(s10[c], s10["T_iss_meas_us"])[s10[c].notna()].sum())
                for c in s10 if c.startswith("T_iss_A_from_"))
        assert a == s["A_hits_s10_six_pairs"]
    assert rec["summary"]["host"]["hits_s9_s10"] == {"pred": 85, "B": 82, "perfect": 93, "B_nospan": 80}
    assert (rec["summary"]["host"]["A_hits_s10_six_pairs"], rec["summary"]["host"]["pred_hits_s10_six_pairs"]) == (131, 132)
    assert rec["summary"]["local"]["qualifies"] and not rec["summary"]["host"]["qualifies"]
    assert rec["qualifies"] is False
