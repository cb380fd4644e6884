"""``benchmarks/fa_split_mechanism.py``: the checks behind docs/calibration/attention-mechanism.md (post hoc)."""

import numpy as np
import pandas as pd
import pytest

from xstage.errors import InputError
from xstage.paths import data_dir

from .bench_scripts import load_script


@pytest.fixture(scope="module")
def mod():
    return load_script("fa_split_mechanism")


def test_composition_of_a_small_kernel(mod):
    # 1 head, 8 m-blocks, W = 4 (own chunk: m-blocks 0 and 1, last), 3 programs: 6 remote tiles in two whole waves,
    # the 2 local tiles are the tail, in halves (items 6-9; the second half of each owns the tile)
    c = mod.composition(1, 1024, programs=3, world_size=4)
    assert c["waves"] == [(3, 3, 0), (3, 3, 0), (3, 0, 1), (1, 0, 1)]
    assert (c["tiles"], c["full_waves"], c["tail"], c["local_tiles"]) == (8, 2, 2, 2)
    assert (c["last_remote_wave"], c["remote_in_last_remote_wave"]) == (1, 3)
    assert c["qloops_after_last_remote"] == pytest.approx(1.0)    # program 0's two tail halves after wave 1
    whole = mod.composition(1, 1024, programs=3, world_size=4, split=False)
    assert whole["waves"] == [(3, 3, 0), (3, 3, 0), (2, 0, 2)]


def test_the_make_up_depends_on_the_tiles_only(mod):
    # 6 heads at M / 2 are 3 heads at M tile for tile in local / remote make-up (the committed 6-head run's pairs)
    for m in (53248, 57344, 61440):
        assert mod.composition(6, m // 2)["key"] == mod.composition(3, m)["key"]
    assert mod.composition(3, 49152)["key"] != mod.composition(3, 57344)["key"]
    c = mod.composition(3, 57344)
    assert (c["tiles"], c["full_waves"], c["tail"], c["local_tiles"]) == (1344, 10, 24, 168)
    assert (c["last_remote_wave"], c["remote_in_last_remote_wave"]) == (8, 120)
    assert sum(w[1] for w in c["waves"]) == 1344 * 7 // 8 and sum(w[2] for w in c["waves"]) == 168


def test_the_replay_order_matches_a_committed_tile_log(mod):
    base = data_dir()
    runs = ("attention-runs/7531682-heldout",)
    tiles = mod.tile_frame(base, mod.kernel_frame(base, runs), runs)
    got = mod.order_check(tiles)
    assert got["tiles"] == len(tiles) > 1000 and got["order_mismatches"] == 0
    assert got["fused_tiles"] > 0 and got["remote_bytes_mismatches"] == 0


def test_smi_state(mod):
    assert mod.smi_state("1815 MHz, 3201 MHz, 67, 693.60 W, 0x0000000000000004") == \
        {"sm_MHz": 1815, "power_W": 693.6, "capped": True}
    assert mod.smi_state("1980 MHz, 3201 MHz, 49, 224.58 W, 0x0000000000000000")["capped"] is False
    with pytest.raises(InputError, match="clocks"):
        mod.smi_state("unavailable")


def _tiles(speed, waves=5, remote_last=None):
    """A tile frame of FA-only, the split kernel and split+stagger: program p's mainloop 100 * speed[p] us every
    wave (FA-only and split+stagger: 100 us); ``remote_last``: programs whose tile of wave 1 stays local."""
    recs = []
    for s in ("fa", "fused_wb_split", "fused_wb_split_stagger"):
        for p, v in enumerate(speed):
            t = 0.0
            for w in range(waves):
                ml = 100.0 * v if s == "fused_wb_split" else 100.0
                if s == "fused_wb_split" and w == 2 and remote_last and p not in remote_last:
                    ml += 4.0                                    # after a remote tile: 4 us longer
                remote = 0 if (remote_last and w == 1 and p in remote_last) else 32768
                recs.append({"run": "r", "rep": 0, "M": 4096, "heads": 3, "head_dim": 128, "block_n": 128,
                             "schedule": s, "split": False, "program": p, "seq": w, "bytes_remote": remote,
                             "mainloop_start(us)": t, "mainloop_end(us)": t + ml,
                             "issue_start(us)": t + ml, "issue_end(us)": t + ml + 1.0})
                t += ml + 1.0
    return pd.DataFrame(recs)


def test_stall_rows_read_issue_time_stretch_and_the_mixed_wave(mod):
    (r,) = mod.stall_rows(_tiles([1.05] * 4, remote_last={0, 1}))
    assert r["issue_median_us"] == pytest.approx(1.0)
    assert r["over_fa_us"] == pytest.approx([5.0, 5.0, 7.0, 5.0, 5.0])   # wave 2: + the 4 us of two of four programs
    assert r["over_split_stagger_us"] == r["over_fa_us"]
    assert r["mixed"] == {"wave": 2, "after_remote": 2, "after_local": 2, "diff_us": 4.0}


def test_drift_rows_read_a_persistent_speed_spread(mod):
    speed = np.linspace(0.98, 1.02, 9)
    (r,) = mod.drift_rows(_tiles(speed))
    assert r["fused_wb_split_persistence"] == pytest.approx(1.0)
    assert r["fused_wb_split_speed_sd_pct"] == pytest.approx(100 * np.std(speed, ddof=1), rel=1e-3)
    assert "fa_persistence" not in r or np.isnan(r["fa_persistence"])        # equal speeds: no correlation defined


def test_tile_frame_fills_only_the_missing_configuration_columns(mod):
    base = data_dir()
    runs = ("attention-runs/ad8f0af-heldout4",)          # its tile log has heads and head dim, not block_n
    tiles = mod.tile_frame(base, mod.kernel_frame(base, runs), runs)
    assert tiles[["heads", "head_dim", "block_n"]].notna().all().all()
    assert set(map(tuple, tiles[["M", "heads", "head_dim"]].drop_duplicates().to_numpy().tolist())) == \
        {(57344, 3, 128), (63488, 3, 128), (65536, 3, 64), (61440, 4, 64), (131072, 2, 64)}
    assert mod.order_check(tiles)["order_mismatches"] == 0
