"""The replay's shared SM store rate (ReplayConfig.sm_pool_GBps): a per-SM rate that depends on how many SMs store."""

import pytest

from xstage.errors import InputError
from xstage.sim.platform import Platform
from xstage.sim.replay import ReplayConfig, replay
from xstage.sim.schedule_fa import fa_qloop

# R and the buffer so large that only the producers' rates matter; the producer rate law gives 1000 B/us
FAST = Platform(name="fast", sm_count=2, drain_rate_GBps=1e3, t_fixed_us=0.0, producer_issue_GBps=1.0,
                capacity_points=((2, 2.0**30),), target="peer")


@pytest.mark.parametrize("engine", ["fast", "simpy"])
def test_pool_is_shared_by_the_issues_that_overlap(engine):
    # program 0 issues 100 B at t = 1 alone: min(1000, 10 / 1) = 10 B/us, ends at 11; program 1 starts at
    # t = 2 while program 0 issues: 10 / 2 = 5 B/us for its whole issue, ends at 22
    s = fa_qloop(1, 16, 2, block_m=8)
    cfg = ReplayConfig(staging_slots=0, local_epilogue_us=0.0, remote_epilogue_us=0.0, record_occupancy=False,
                       engine=engine, sm_pool_GBps=0.01)
    r = replay(s, [1.0, 2.0], [100.0, 100.0], FAST, cfg)
    assert r.arrays["epi_end"].tolist() == pytest.approx([11.0, 22.0], rel=1e-9)
    plain = replay(s, [1.0, 2.0], [100.0, 100.0], FAST, ReplayConfig(
        staging_slots=0, local_epilogue_us=0.0, remote_epilogue_us=0.0, record_occupancy=False, engine=engine))
    assert plain.arrays["epi_end"].tolist() == pytest.approx([1.1, 2.1], rel=1e-9)


def test_bad_pool_names_the_field():
    with pytest.raises(InputError, match="sm_pool_GBps"):
        ReplayConfig(sm_pool_GBps=0.0)
