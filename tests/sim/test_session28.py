"""Session 28 (docs/calibration/h100-broad24.md): call28's folders come from a card no earlier record names, its
scores follow from them, the median-rate rule it fixed beforehand is the one the scorers and `--own-rate` use, and
the figures the docs quote are the record's."""

import json

import pytest

from xstage.paths import data_dir
from xstage.records import load_records

from .bench_scripts import load_script

EXTRA = data_dir() / "calibration-extra"
CALL28 = tuple(f"h100-pcie-host-fresh1{i}-call28" for i in (1, 2, 3))
EARLIER = ("h100-pcie-host", "h100-pcie-host-fresh", "h100-pcie-host-fresh2", "h100-pcie-host-fresh11",
           "h100-pcie-host-fresh10", "h100-pcie-host-fresh4", "h100-pcie-host-fresh11-c27",
           "h100-pcie-host-fresh11-c27b", "h100-pcie-host-fresh11-call27", "h100-pcie-host-fresh10-call27b",
           "h100-pcie-host-fresh11-call27c", "h100-pcie-host-fresh11-c27d")   # cards 1-12
QUIET = {"log": lambda *a, **k: None}


def _uuid(folder: str) -> str:
    return load_records(EXTRA / folder / "points.parquet", "point")[1]["provenance"]["gpu"]["gpu_uuid"]


def test_call28_is_one_call_on_a_thirteenth_card():
    earlier = {_uuid(f) for f in EARLIER}
    assert len(earlier) == 12
    (card,) = {_uuid(f) for f in CALL28}
    assert card.startswith("GPU-7961258c") and card not in earlier


def test_call28_scores_follow_from_the_folders_and_are_the_docs_figures():
    rec = json.loads((EXTRA / "call28-scores.json").read_text())
    again = json.loads(json.dumps(load_script("calib_call28").score(**QUIET)))
    for key in ("rate_check", "primary_median_rate", "secondary_fitted_rate"):
        assert again[key] == rec[key], key
    prim = rec["primary_median_rate"]["claims"]
    p90 = prim["M1_p90_each_at_most_35"]["p90"]
    assert [round(p90[f], 3) for f in CALL28] == [0.263, 0.236, 0.195]
    assert prim["verdict"] == "met" and prim["M4_median_p90_at_most_25"]["met"]
    assert (prim["M3_fewer_pairs_off"]["candidate"], prim["M3_fewer_pairs_off"]["pool24"]) == (36, 54)
    assert not any(c["suspect"] for c in rec["rate_check"].values())


def test_the_median_rule_is_rate_checks_median_and_differs_from_the_fit_where_one_point_pulled_it():
    mod = load_script("calib_knee_band25")
    _, _, fit = mod.folder_data("h100-pcie-host-fresh13-call27c", "fit")
    _, _, med = mod.folder_data("h100-pcie-host-fresh13-call27c", "median")
    assert fit == pytest.approx(52.256, abs=1e-3) and med == pytest.approx(52.735, abs=1e-3)
    with pytest.raises(ValueError, match="rate"):
        mod.folder_data("h100-pcie-host-fresh13-call27c", "mean")


def test_a_scorer_without_variants_prints_its_usage_on_a_missing_json(capsys):
    with pytest.raises(SystemExit) as exc:
        load_script("calib_call28").main([])
    assert exc.value.code == 2 and "--json" in capsys.readouterr().err


def test_call27_sh_takes_call24s_broad_grids_with_call24s_time_limits(tmp_path):
    from .bench_scripts import run_device_script
    proc, calls, _ = run_device_script(tmp_path, "call27.sh", "NVIDIA H100 80GB HBM3", "call28c", "fresh2", "fresh3",
                                       "fresh5", "wide")
    assert proc.returncode == 0
    assert [c.split("--name ")[1].split()[0] for c in calls] == [f"h100-pcie-host-fresh{g}-call28c" for g in (2, 3, 5)]
    assert all("--target host" in c and "--model two-stage-gated2" in c for c in calls)
    assert "grid wide is neither a knee grid" in proc.stdout
