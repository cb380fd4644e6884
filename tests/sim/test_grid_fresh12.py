"""``fresh12`` (session 14, knee17): no (K, B) pair or K of an earlier grid; lockstep only; the knee ratio
(V - R T_iss0)/Q(K) under the session-7 gated host platform straddles 1 at every K; at each of the four larger K the
two gap-swept pairs sit just below (0.8-0.95) and past (1.15-1.35) the knee, with a B between them at 0.95-1.2 (the
pairs fresh11's own fit missed) that ``bracket`` may hold out."""

from pathlib import Path

from xstage.hw.calib.grids import GRIDS, capacity_limited, grid_fields
from xstage.sim.platform import Platform
from xstage.units import KiB

EXTRA = Path(__file__).resolve().parents[2] / "data" / "calibration-extra"


def _pairs(g):
    return ({(k, b) for k in g["producers"] for b in g["sizes"]} | set(g["gap_configs"])
            | {(k, b) for k in g["iso_producers"] for b in g["iso_sizes"]})


def check_new_lockstep_grid(grid: str):
    """``grid`` shares no K with any other grid, is lockstep only with the isolated sweep at every K, holds >= 3
    B <= 24 KiB, and sweeps the gap at its four larger K (its quick sweeps among them). Used by fresh13's test."""
    g = GRIDS[grid]
    new = _pairs(g)
    for name in GRIDS:
        if name != grid:
            assert not {k for k, _ in new} & {k for k, _ in _pairs(GRIDS[name])}, name
    assert g["free_gaps"] == 0 and set(g["iso_producers"]) == set(g["producers"])
    assert sum(b <= 24 * KiB for b in g["sizes"]) >= 3
    assert set(grid_fields(grid, quick=True)["gap_configs"]) <= set(g["gap_configs"])
    assert {k for k, _ in g["gap_configs"]} == set(g["producers"][1:])


def test_fresh12_shares_no_pair_or_K_with_earlier_grids():
    check_new_lockstep_grid("fresh12")


def check_straddles_the_knee(grid: str):
    """The knee ratio under the session-7 gated host platform crosses 1 at every K of ``grid``; at each of the four
    larger K the two gap-swept pairs sit at 0.8-0.95 and 1.15-1.35 with every B between them at 0.95-1.2."""
    ref = Platform.load(EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json")
    R = ref.drain_rate_GBps * 1e3
    ratio = lambda k, b: (k * b - R * ref.issue_time0_us(k, b)) / ref.capacity_bytes(k)   # noqa: E731
    g = GRIDS[grid]
    for k in g["producers"]:
        limited = [capacity_limited(k, b, ref) for b in g["sizes"]]
        assert not limited[0] and limited[-1], k
        assert ratio(k, g["sizes"][0]) < 1 < ratio(k, g["sizes"][-1]), k
    for k in g["producers"][1:]:
        swept = sorted(b for kk, b in g["gap_configs"] if kk == k)
        r = [ratio(k, b) for b in swept]
        assert len(r) == 2 and 0.8 < r[0] < 0.95 and 1.15 < r[1] < 1.35, (k, r)
        between = [ratio(k, b) for b in g["sizes"] if swept[0] < b < swept[1]]
        assert between and all(0.95 < x < 1.2 for x in between), (k, between)


def test_fresh12_straddles_the_knee_at_every_K_with_a_pair_between_its_gap_sweeps():
    check_straddles_the_knee("fresh12")
