"""``fresh15`` (session 18): built as fresh14 (``test_grid_fresh12``'s checks) on new K and half-KiB B (every whole
KiB up to 38 is taken), every K and every B new to every earlier grid; the grid of combo18's pre-registered fresh
test."""

from xstage.hw.calib.grids import GRIDS, describe_grid

from .test_grid_fresh12 import _pairs, check_new_lockstep_grid, check_straddles_the_knee


def test_fresh15_is_built_as_fresh14():
    check_new_lockstep_grid("fresh15")
    check_straddles_the_knee("fresh15")


def test_fresh15_shares_no_B_with_earlier_grids_and_every_B_is_whole_16_byte_stores():
    new = {b for _, b in _pairs(GRIDS["fresh15"])}
    for name in GRIDS:
        if name != "fresh15":
            assert not new & {b for _, b in _pairs(GRIDS[name])}, name
    assert all(b % 16 == 0 and b % 1024 == 512 for b in new)
    assert describe_grid("fresh15") == ("fresh15 (K 25,57,85,115,129 x B 12.5,18.5,22.5,24.5,26.5,28.5,30.5,33.5,40.5,"
                                        "200.5 KiB; 8 gap sweeps, 0 also free-running; isolated sweep at every K on "
                                        "7 sizes)")
