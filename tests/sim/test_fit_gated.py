"""``two-stage-gated`` (session 7): only (K, B) pairs whose zero-gap lockstep run waited for the drain are read
as backpressured; the fresh grid shares no pair with the wide one."""

import json

import pandas as pd
import pytest

from xstage.hw.calib.grids import GRIDS
from xstage.sim.platform_fit import MODELS, capacity_law_of, drain_seen_pairs


def _rate(rows):
    return pd.DataFrame([{"phase": "rate", "mode": "periodic", "producers": k, "bytes_per_producer": b,
                          "gap_measured(us)": g} for k, b, g in rows])


def test_drain_seen_only_where_the_gap_exceeds_the_barrier():
    barrier = [(k, b, 1.1) for k in (4, 8, 16, 33) for b in (2048, 4096)]
    pts = _rate(barrier + [(132, 65536, 150.0), (132, 32768, 1.2)])
    assert drain_seen_pairs(pts) == {(132, 65536)}
    assert drain_seen_pairs(_rate(barrier)) == set()                    # local HBM: every gap is the barrier
    free = _rate([(132, 65536, 150.0)]).assign(mode="free")
    assert drain_seen_pairs(pd.concat([_rate(barrier), free])) == set()  # free-running runs do not count


def test_model_name_and_law():
    assert capacity_law_of("two-stage-gated") == "relaxing-gated" and MODELS["v1"] == "points"


def test_fresh_grid_has_no_pair_of_wide():
    wide, fresh = GRIDS["wide"], GRIDS["fresh"]
    pairs = lambda g: ({(k, b) for k in g["producers"] for b in g["sizes"]} | set(g["gap_configs"])  # noqa: E731
                       | {(k, b) for k in g["iso_producers"] for b in g["iso_sizes"]})
    assert not pairs(fresh) & pairs(wide) and all(4 <= k <= 132 for k in fresh["producers"])


def test_results_report_the_preregistered_platform_on_the_fresh_run():
    from xstage.compare.calibration_records import summarize_results
    from xstage.paths import data_dir
    host = summarize_results(data_dir(), "h200-pcie-host-fresh")
    assert host["preregistered_platform"] == "calibration-extra/h200-pcie-host-wide-two-stage-gated"
    assert host["preregistered_n_points"] == 163 and 0 < host["preregistered_median_rel_err_T_iss"] < 1
    scores = json.loads((data_dir() / "calibration-extra" / "fresh-s7-scores.json").read_text())
    pre = scores["host"]["preregistered"]["two-stage-gated"]
    assert host["preregistered_p90_rel_err_T_iss"] == pytest.approx(pre["p90_rel_err_T_iss"], rel=1e-9)
    assert "preregistered_platform" not in summarize_results(data_dir(), "h200-pcie-host-wide")
