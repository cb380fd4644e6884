"""``fresh11`` (session 13): no (K, B) pair of an earlier grid; lockstep only; three B <= 24 KiB; the knee ratio
(V - R T_iss0)/Q(K) under the session-7 gated host platform straddles 1 at every K, and each gap-swept pair of the four
larger K sits near the knee (0.85-1.4)."""

from pathlib import Path

from xstage.hw.calib.grids import GRIDS, capacity_limited, grid_fields
from xstage.sim.platform import Platform
from xstage.units import KiB

EXTRA = Path(__file__).resolve().parents[2] / "data" / "calibration-extra"


def _pairs(g):
    return ({(k, b) for k in g["producers"] for b in g["sizes"]} | set(g["gap_configs"])
            | {(k, b) for k in g["iso_producers"] for b in g["iso_sizes"]})


def test_fresh11_shares_no_pair_or_K_with_earlier_grids():
    g = GRIDS["fresh11"]
    new = _pairs(g)
    for name in GRIDS:
        if name != "fresh11":
            assert not new & _pairs(GRIDS[name]), name
            assert not {k for k, _ in new} & {k for k, _ in _pairs(GRIDS[name])}, name
    assert g["free_gaps"] == 0
    assert sum(b <= 24 * KiB for b in g["sizes"]) >= 2
    assert set(grid_fields("fresh11", quick=True)["gap_configs"]) <= set(g["gap_configs"])


def test_fresh11_straddles_the_knee_at_every_K_with_two_gap_sweeps_near_it():
    ref = Platform.load(EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json")
    R = ref.drain_rate_GBps * 1e3
    ratio = lambda k, b: (k * b - R * ref.issue_time0_us(k, b)) / ref.capacity_bytes(k)   # noqa: E731
    g = GRIDS["fresh11"]
    for k in g["producers"]:
        limited = [capacity_limited(k, b, ref) for b in g["sizes"]]
        assert not limited[0] and limited[-1], k
        assert ratio(k, g["sizes"][0]) < 1 < ratio(k, g["sizes"][-1]), k
    for k in g["producers"][1:]:
        r = sorted(ratio(kk, b) for kk, b in g["gap_configs"] if kk == k)
        assert len(r) == 2 and 0.85 < r[0] < 1 < 1.15 < r[1] < 1.4, (k, r)
