"""The drain-spread law record (benchmarks/finite_runs.py --spread-law): its split is the recorded seed-0 split, its
figures are those of its own runs, and a run replayed with the recorded table gives the recorded answer."""

import json

import numpy as np
import pandas as pd
import pytest

from xstage.paths import data_dir
from xstage.sim.bursts import BurstConfig, simulate_bursts
from xstage.sim.fluid_ordered import spread_of_k
from xstage.sim.platform import load_platform

EXTRA = data_dir() / "calibration-extra"
RECORD = EXTRA / "finite-runs-spread-law.json"
SPLIT = EXTRA / "finite-runs-drain-order.json"


def _median_err(runs):
    return float(np.median([abs(r["T_iss_us"] / r["span_median_us"] - 1) for r in runs]))


def test_law_was_fitted_on_the_recorded_fitted_half_only():
    rec, split = json.loads(RECORD.read_text()), json.loads(SPLIT.read_text())
    for label in ("host v1", "host two-stage-relax"):
        law, old = rec[label]["spread_law"], split[label]["drain_order"]["split"]
        assert sorted((r["K"], r["B"]) for r in law["fitted"]["runs_law"]) == sorted(map(tuple, old["fitted"]))
        assert sorted((r["K"], r["B"]) for r in law["held_out"]["runs_law"]) == sorted(map(tuple, old["held_out"]))
        losses = law["fit_loss_by_K_and_spread"]
        for K, a in law["law"]["table"].items():       # each a_K is its own K's best fitted loss (ties: smaller a)
            best = min(losses[K].items(), key=lambda kv: (kv[1], float(kv[0])))
            assert float(best[0]) == a
        for half in ("fitted", "held_out", "new_probe_all"):
            assert law[half]["law"]["T_iss_median_vs_span_median"]["median_rel_err"] == pytest.approx(
                _median_err(law[half]["runs_law"]))


def test_a_held_out_run_replays_to_its_recorded_answer():
    rec = json.loads(RECORD.read_text())
    law = rec["host v1"]["spread_law"]
    p = load_platform(EXTRA / "h200-pcie-host-wide" / "platform.json")
    run = next(r for r in law["new_probe_all"]["runs_law"] if (r["K"], r["B"]) == (96, 262144))   # K not fitted
    a = spread_of_k(96, law["law"]["table"])
    ends = sorted((law["law"]["table"]["64"], law["law"]["table"]["132"]))
    assert ends[0] < a < ends[1]                          # between its neighbours in log2 K
    s = simulate_bursts(p, BurstConfig(96, 262144, 0.0, run["n"], skip=0, engine="simpy", drain_order="ordered",
                                       drain_spread=a), record_occupancy=False).summary(p)
    assert s["T_iss_us"] == pytest.approx(run["T_iss_us"], rel=1e-9)
    assert s["drained_us"] == pytest.approx(run["drained_us"], rel=1e-9)
    new = pd.read_csv(EXTRA / "host-probe-9fb5407" / "runs.csv.gz")
    meas = new[(new.trial == 0) & (new.producers == 96) & (new.bytes_per_producer == 262144)]["span_median_us"].median()
    assert run["span_median_us"] == pytest.approx(meas)
