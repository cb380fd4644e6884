"""Timeline aggregation: exact interval integrals, activity, Gantt cut and heatmap."""

import numpy as np
import pandas as pd

from xstage.compare.timeline import activity_frame, gantt_frame, interval_integral, timeline_frames


def _tiles(rows):
    cols = ["sm", "seq", "kind", "bytes_remote", "mainloop_start(us)", "mainloop_end(us)", "issue_start(us)",
            "issue_end(us)"]
    f = pd.DataFrame(rows, columns=cols)
    for c in ("expert", "m", "n"):
        f[c] = 0
    f["mma_stall(us)"] = 0.0
    return f


def test_interval_integral_is_exact_per_bin():
    area = interval_integral([0.0, 1.5], [2.0, 3.5], np.array([0.0, 1.0, 2.0, 3.0, 4.0]))
    assert area.tolist() == [1.0, 1.5, 1.0, 0.5]
    weighted = interval_integral([0.0], [2.0], np.array([0.0, 1.0, 2.0]), weight=[3.0])
    assert weighted.tolist() == [3.0, 3.0]


def test_activity_of_two_sms():
    # SM 0 computes 0-4, issues 1000 bytes over 4-6; SM 1 computes 2-6
    t = _tiles([(0, 0, "L2", 1000.0, 0.0, 4.0, 4.0, 6.0), (1, 0, "L1", 0.0, 2.0, 6.0, 6.0, 6.0)])
    a = activity_frame(t, bins=3, drain_rate_GBps=0.25)  # 250 bytes/us
    assert a["tensor_active"].tolist() == [0.5, 1.0, 0.5]
    assert a["sms_issuing"].tolist() == [0.0, 0.0, 1.0]
    assert a["injection(GBps)"].tolist() == [0.0, 0.0, 0.5]
    # implied occupancy: 1000 bytes injected in the last bin, 500 drained in it
    assert a["queue(MiB)"].tolist() == [0.0, 0.0, 500 / 2**20]


def test_gantt_is_cut_and_the_heatmap_covers_every_sm():
    rows = [(s, i, "L1", 0.0, float(i), i + 1.0, i + 1.0, i + 1.0) for s in range(4) for i in range(5)]
    t = _tiles(rows)
    g, whole = gantt_frame(t, gantt_limit=6)
    assert not whole and len(g) == 6 and g["mainloop_start(us)"].max() <= 1.0
    f = timeline_frames(t, bins=5, gantt_limit=6)
    h = f["heatmap"]
    assert sorted(h["sm"].unique()) == [0, 1, 2, 3]
    assert np.allclose(h["busy"], 1.0)
    assert timeline_frames(t, bins=5, gantt_limit=100)["heatmap"] is None
