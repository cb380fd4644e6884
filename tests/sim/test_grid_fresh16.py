"""``fresh16`` (session 21): built as fresh15 (``test_grid_fresh12``'s checks) on new K and quarter-KiB B, every K and
every B new to every earlier grid; the grid of combo18's second pre-registered fresh test."""

from xstage.hw.calib.grids import GRIDS, describe_grid

from .test_grid_fresh12 import _pairs, check_new_lockstep_grid, check_straddles_the_knee


def test_fresh16_is_built_as_fresh15():
    check_new_lockstep_grid("fresh16")
    check_straddles_the_knee("fresh16")


def test_fresh16_shares_no_B_with_earlier_grids_and_every_B_is_a_quarter_KiB():
    new = {b for _, b in _pairs(GRIDS["fresh16"])}
    for name in GRIDS:
        if name != "fresh16":
            assert not new & {b for _, b in _pairs(GRIDS[name])}, name
    assert all(b % 1024 in (256, 768) for b in new)
    assert describe_grid("fresh16") == ("fresh16 (K 23,55,83,113,131 x B 11.75,21.25,23.25,25.25,29.25,31.25,32.25,"
                                        "35.25,45.25,210.25 KiB; 8 gap sweeps, 0 also free-running; isolated sweep "
                                        "at every K on 7 sizes)")
