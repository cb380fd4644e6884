"""The what-if grid: the one-producer symmetry reduction is exact; the grid holds the model's values."""

import math

import pytest

from xstage.compare.whatif import WhatIfGrid, simulate_symmetric, whatif_frames
from xstage.errors import InputError
from xstage.sim.bursts import BurstConfig, simulate_bursts



@pytest.mark.parametrize("mode,K,B,G", [("periodic", 148, 32768, 2.0), ("periodic", 37, 65536, 0.5),
                                        ("isolated", 148, 65536, 0.0)])
def test_symmetry_reduction_matches_the_k_producer_run(b200, mode, K, B, G):
    full = simulate_bursts(b200, BurstConfig(K, B, G, bursts=20, mode=mode)).summary(b200)
    t_iss, period = simulate_symmetric(b200, K, B, G, b200.drain_rate_GBps, b200.capacity_bytes(K), mode, 20)
    assert math.isclose(t_iss, full["T_iss_us"], rel_tol=1e-9)
    assert math.isclose(period, full["period_us"], rel_tol=1e-9)


def test_grid_frames_hold_the_model_and_the_simulator(b200):
    grid = WhatIfGrid((74, 148), (16384,), (0.0, 8.0), (717.0,), (4.25,), bursts=12)
    f = whatif_frames(b200, grid)
    per = f["periodic"]
    assert len(per) == 2 * 1 * 2 * 1 * 1
    row = per[(per["producers"] == 148) & (per["gap(us)"] == 0.0)].iloc[0]
    V, R = 148 * 16384, 717e3
    assert math.isclose(row["model_issue(us)"], V / R, rel_tol=1e-12)
    assert math.isclose(row["sim_issue(us)"], V / R, rel_tol=1e-6)
    assert bool(row["rate_bound_ok"]) is False
    m = f["model_periodic"]
    assert set(m["gap(us)"].round(9)) >= {0.0, 8.0}
    assert set(f["isolated"]["series"]) == {"model", "sim"}
    assert f["axes"]["producers"] == [74, 148]


def test_bad_grid_is_refused():
    with pytest.raises(InputError, match="producers"):
        WhatIfGrid((), (1024,), (0.0,), (1.0,), (1.0,))
    with pytest.raises(InputError, match="drain_rate_GBps"):
        WhatIfGrid((1,), (1024,), (0.0,), (0.0,), (1.0,))
