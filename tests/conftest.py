import os

import pytest
from hypothesis import settings

from xstage.sim.platform import Platform, load_platform

# CI (.ci/run) runs the property tests on a fixed sequence of examples, so that a commit is green or red for
# everyone alike; a plain `pytest` explores fresh random examples each run (and prints a failure's blob)
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "explore"))


@pytest.fixture
def toy_platform():
    """R = 1 B/us, per-producer issue 4 B/us, no fixed cost, Q(2) = 6 bytes: numbers one can work by hand."""
    return Platform(name="toy", sm_count=8, drain_rate_GBps=0.001, t_fixed_us=0.0, producer_issue_GBps=0.004,
                    capacity_points=((2, 6.0),), target="peer")


@pytest.fixture(scope="session")
def b200():
    """The bundled paper-b200 platform (the paper's B200 figures)."""
    return load_platform("paper-b200")


@pytest.fixture(scope="session")
def run_on_queue():
    """``run_on_queue(R, Q, processes) -> (env, queue)``: a fresh simpy ``FluidXStage(R, Q)``; every generator
    of ``processes(env, queue)`` runs as a process, to the end."""
    import simpy

    from xstage.sim.xqueue import FluidXStage

    def run(R, Q, processes):
        env = simpy.Environment()
        queue = FluidXStage(env, R, Q)
        for gen in processes(env, queue):
            env.process(gen)
        env.run()
        return env, queue
    return run

