"""The measured start skew's post-hoc test (benchmarks/finite_skew.py, session 11): how a run's skew is read, the
stand-in probe, and the committed record's verdict recomputed from its own rows and the committed bursts."""

import json

import pandas as pd
import pytest

from xstage.paths import data_dir

from .bench_scripts import load_script

EXTRA = data_dir() / "calibration-extra"
RECORD = EXTRA / "finite-skew-s11-posthoc.json"


def _bursts(tmp_path, trials):
    """One host run (K 4, B 2048, n 4): per trial the (start_min, start_max, end_max) of bursts 0..3."""
    rows, runs = [], []
    for t, bursts in enumerate(trials):
        for b, (s0, s1, e1) in enumerate(bursts):
            rows.append({"trial": t, "burst": b, "start_min_us": s0, "start_max_us": s1, "end_min_us": s1,
                         "end_median_us": e1, "end_max_us": e1, "target": "host", "K": 4, "B": 2048, "n": 4})
        runs.append({"target": "host", "K": 4, "B": 2048, "n": 4, "trial": t, "T_iss_us": 0.3 + t / 10})
    pd.DataFrame(rows).to_csv(tmp_path / "bursts.csv.gz", index=False)
    pd.DataFrame(runs).to_csv(tmp_path / "runs.csv", index=False)


def test_skew_is_the_median_over_steady_bursts_then_trials(tmp_path):
    fs = load_script("finite_skew")
    # bursts 0 and 1 (the first half) carry huge skews that must not count
    _bursts(tmp_path, [[(0, 9, 10), (20, 29, 30), (40, 40.1, 40.3), (50, 50.3, 50.5)],
                       [(0, 9, 10), (20, 29, 30), (40, 40.2, 40.4), (50, 50.2, 50.4)],
                       [(0, 9, 10), (20, 29, 30), (40, 40.5, 40.6), (50, 50.5, 50.6)]])
    r = fs.skews(tmp_path).iloc[0]
    assert r["skew_us"] == pytest.approx(0.2)            # trials 0.2, 0.2, 0.5
    assert r["after_us"] == pytest.approx(0.2)           # trials 0.2, 0.2, 0.1
    assert r["T_iss_us"] == pytest.approx(0.4)           # runs.csv median


def test_stand_in_probe_takes_the_nearest_k_of_the_other_long_small_runs():
    fs = load_script("finite_skew")
    runs = pd.DataFrame([
        {"target": "host", "K": 4, "B": 6144, "n": 32, "skew_us": 0.16},
        {"target": "host", "K": 6, "B": 3072, "n": 64, "skew_us": 0.19},
        {"target": "host", "K": 6, "B": 10240, "n": 8, "skew_us": 0.50},     # n < 32: never
        {"target": "host", "K": 6, "B": 98304, "n": 64, "skew_us": 0.50},    # B > 12 KiB: never
        {"target": "host", "K": 10, "B": 3072, "n": 128, "skew_us": 0.27},
        {"target": "host", "K": 12, "B": 6144, "n": 128, "skew_us": 0.90},   # K > 10: never
        {"target": "local", "K": 8, "B": 5120, "n": 64, "skew_us": 0.90}])
    assert fs.stand_in_probe(runs, "host", 6) == pytest.approx(0.19)
    assert fs.stand_in_probe(runs, "host", 6, exclude=(6, 3072, 64)) == pytest.approx(0.16)   # K 4 is nearer than 10
    assert fs.stand_in_probe(runs, "host", 8) == pytest.approx((0.19 + 0.27) / 2)   # K 6 and 10 equally near
    assert fs.stand_in_probe(runs, "host", 12) == pytest.approx(0.27)


def test_committed_record_verdict_follows_from_its_rows_and_the_bursts():
    fs = load_script("finite_skew")
    rec = json.loads(RECORD.read_text())
    f = pd.DataFrame(rec["runs"])
    for target, s in rec["summary"].items():
        g = f[(f["target"] == target) & (f["K"] <= fs.K_MAX) & f["session"].isin(fs.JUDGED)]
        assert len(g) == s["judged_runs"] == 28
        hits = {lab: int((g[f"err_{lab}"].abs() <= fs.TOL).sum()) for lab in fs.LABELS}
        assert hits == s["judged_hits_K_le_10"]
        assert s["qualifies"] == (hits["stand_in"] > hits["pred"] and s["largest_loss_one_measurement"] <= 1
                                  and hits["perfect"] > hits["pred"])
        assert not s["qualifies"]
    # the measured skews are the committed bursts' (one measurement re-read)
    m = fs.skews(EXTRA / "lockstep-repeat-6406bd8-r2").set_index(["target", "K", "B", "n"])
    r2 = f[f["measurement"] == "lockstep-repeat-6406bd8-r2"]
    assert len(r2) == 60
    for r in r2.itertuples():
        assert m.loc[(r.target, r.K, r.B, r.n), "skew_us"] == pytest.approx(r.skew_meas_us, abs=1e-12)
        assert m.loc[(r.target, r.K, r.B, r.n), "T_iss_us"] == pytest.approx(r.T_iss_meas_us, abs=1e-12)
    # runs the rule leaves alone keep the committed prediction
    big = f[f["K"] > fs.K_MAX]
    assert (big["T_iss_stand_in_us"] == big["T_iss_pred_us"]).all()
