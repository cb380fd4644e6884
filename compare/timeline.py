"""Timeline frames of one fused kernel (the paper's Fig. 9) from its tile records.

All per-bin quantities are exact time integrals over the bins (no sampling): the integral of
"intervals active" up to x is sum_i clip(x - start_i, 0, end_i - start_i), computed from sorted
starts and ends with prefix sums, so 2.6 M tiles aggregate in well under a second.

- ``activity``: per time bin, Tensor-Core activity (mean fraction of SMs in a mainloop), SMs issuing
  remote stores, the injection rate (GB/s: bytes spread evenly over each tile's issue span) and the
  X-Stage occupancy -- the replay's own queue log when given, else the occupancy implied by draining
  the injected bytes at R (a Lindley recursion over the bins);
- ``heatmap``: per SM and time bin, the fraction of the bin spent in mainloops (long form);
- ``gantt``: exact per-tile segments (mainloop and remote-store issue) for the tiles that start in a
  window holding at most ``gantt_limit`` tiles (``GANTT_LIMIT``) -- the whole kernel when it is small enough.
"""

import numpy as np
import pandas as pd

# Exact per-tile Gantt up to this many tiles per schedule. WebGL line drawing costs little on a GPU,
# but headless browsers (CI) draw WebGL in software (SwiftShader): 30,000 tiles took ~15 s there,
# 3,000 about 3 s; 12,000 keeps a two-schedule page usable in both.
GANTT_LIMIT = 12_000


def interval_integral(start, end, edges, weight=None, *more_weights):
    """Integral over [edges[k], edges[k+1]] of sum_i weight_i 1[start_i <= t < end_i], for every bin.
    Extra weight arrays reuse the same sorts and give one result each (then a list is returned)."""
    start = np.asarray(start, dtype=float)
    end = np.asarray(end, dtype=float)
    weights = [np.ones_like(start) if weight is None else np.asarray(weight, dtype=float)]
    weights += [np.asarray(w, dtype=float) for w in more_weights]
    x = np.asarray(edges, dtype=float)
    if start.size == 0:
        zeros = [np.zeros(len(x) - 1) for _ in weights]
        return zeros if more_weights else zeros[0]
    os_, oe = np.argsort(start, kind="stable"), np.argsort(end, kind="stable")
    s, e = start[os_], end[oe]
    ns = np.searchsorted(s, x, side="right")
    ne = np.searchsorted(e, x, side="right")
    out = []
    for w in weights:
        ws, we = w[os_], w[oe]
        cw_s = np.concatenate([[0.0], np.cumsum(ws)])
        cws_s = np.concatenate([[0.0], np.cumsum(ws * s)])
        cw_e = np.concatenate([[0.0], np.cumsum(we)])
        cwe_e = np.concatenate([[0.0], np.cumsum(we * e)])
        total = (cw_s[ns] * x - cws_s[ns]) - (cw_e[ne] * x - cwe_e[ne])
        out.append(np.diff(total))
    return out if more_weights else out[0]


def _edges(tiles: pd.DataFrame, bins: int) -> np.ndarray:
    t_end = float(np.nanmax(tiles[["mainloop_end(us)", "issue_end(us)"]].to_numpy())) if len(tiles) else 1.0
    return np.linspace(0.0, max(t_end, 1e-9), bins + 1)


def activity_frame(tiles: pd.DataFrame, *, bins: int = 600, num_sms: int | None = None,
                   drain_rate_GBps: float | None = None, occupancy: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per-bin activity of one kernel run (one schedule)."""
    edges = _edges(tiles, bins)
    width = np.diff(edges)
    sms = num_sms or int(tiles["sm"].max()) + 1
    busy = interval_integral(tiles["mainloop_start(us)"].to_numpy(), tiles["mainloop_end(us)"].to_numpy(),
                             edges) / (width * sms)
    nbytes = tiles["bytes_remote"].to_numpy(dtype=float)
    is_remote = nbytes > 0
    i0 = tiles["issue_start(us)"].to_numpy(dtype=float)[is_remote]
    i1 = tiles["issue_end(us)"].to_numpy(dtype=float)[is_remote]
    span = i1 - i0
    rate = np.where(span > 0, nbytes[is_remote] / np.where(span > 0, span, 1.0), 0.0)
    issuing, injected = interval_integral(i0, i1, edges, np.ones_like(i0), rate)
    issuing = issuing / width
    out = pd.DataFrame({"time(us)": edges[:-1], "width(us)": width, "tensor_active": busy,
                        "sms_issuing": issuing, "injection(GBps)": injected / width / 1e3})
    if occupancy is not None and len(occupancy):
        t = occupancy["time(us)"].to_numpy(dtype=float)
        q = occupancy["queue(bytes)"].to_numpy(dtype=float)
        out["queue(MiB)"] = np.interp(edges[1:], t, q) / 2**20
        out["queue_source"] = "replay log"
    elif drain_rate_GBps:
        level, levels = 0.0, np.empty(bins)
        drained = drain_rate_GBps * 1e3 * width
        for k in range(bins):
            level = max(0.0, level + injected[k] - drained[k])
            levels[k] = level
        out["queue(MiB)"] = levels / 2**20
        out["queue_source"] = "implied: injected bytes drained at R"
    return out


def heatmap_frame(tiles: pd.DataFrame, *, bins: int = 600) -> pd.DataFrame:
    """Per SM and bin: fraction of the bin in mainloops (long form: sm, time(us), busy)."""
    edges = _edges(tiles, bins)
    width = np.diff(edges)
    parts = []
    for sm, grp in tiles.groupby("sm", sort=True):
        busy = interval_integral(grp["mainloop_start(us)"], grp["mainloop_end(us)"], edges) / width
        parts.append(pd.DataFrame({"sm": int(sm), "time(us)": edges[:-1], "busy": busy.astype(np.float32)}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["sm", "time(us)", "busy"])


def gantt_frame(tiles: pd.DataFrame, *, gantt_limit: int = GANTT_LIMIT) -> tuple[pd.DataFrame, bool]:
    """Exact segments of the first ``gantt_limit`` tiles in start order; returns (frame, whole_kernel)."""
    whole = len(tiles) <= gantt_limit
    start = tiles["mainloop_start(us)"].to_numpy(dtype=float)
    if whole:
        pick = np.argsort(start, kind="stable")
    else:  # O(n) selection of the earliest tiles, then sort only those
        first = np.argpartition(start, gantt_limit - 1)[:gantt_limit]
        pick = first[np.argsort(start[first], kind="stable")]
    t = tiles.iloc[pick]
    cols = ["sm", "seq", "kind", "expert", "m", "n", "bytes_remote", "mainloop_start(us)", "mainloop_end(us)",
            "issue_start(us)", "issue_end(us)", "mma_stall(us)"]
    out = t[cols].copy()
    out["kind"] = out["kind"].astype(str)
    return out.reset_index(drop=True), whole


def timeline_frames(tiles: pd.DataFrame, *, bins: int = 600, gantt_limit: int = GANTT_LIMIT,
                    drain_rate_GBps: float | None = None, occupancy: pd.DataFrame | None = None,
                    num_sms: int | None = None) -> dict:
    """Frames of one schedule's timeline: activity, heatmap (only when the Gantt is cut), gantt."""
    gantt, whole = gantt_frame(tiles, gantt_limit=gantt_limit)
    return {"activity": activity_frame(tiles, bins=bins, num_sms=num_sms, drain_rate_GBps=drain_rate_GBps,
                                       occupancy=occupancy),
            "heatmap": None if whole else heatmap_frame(tiles, bins=bins),
            "gantt": gantt, "gantt_whole": whole, "tiles": int(len(tiles)),
            "makespan(us)": float(tiles["issue_end(us)"].max()) if len(tiles) else 0.0}


def timeline_summary(runs: dict) -> pd.DataFrame:
    """One row per schedule: tiles, makespan, mean Tensor-Core activity, share of time below 50 %
    activity, peak injection and peak occupancy."""
    rows = []
    for name, r in runs.items():
        act = r["activity"]
        w = act["width(us)"]
        rows.append({"schedule": name, "tiles": r["tiles"], "makespan(us)": r["makespan(us)"],
                     "tensor_active_mean": float((act["tensor_active"] * w).sum() / w.sum()),
                     "time_below_50pct_activity": float(w[act["tensor_active"] < 0.5].sum() / w.sum()),
                     "injection_peak(GBps)": float(act["injection(GBps)"].max()),
                     "queue_peak(MiB)": float(act["queue(MiB)"].max()) if "queue(MiB)" in act else float("nan"),
                     "gantt": "exact" if r["gantt_whole"] else f"heatmap + first {len(r['gantt']):,} tiles"})
    return pd.DataFrame(rows)


def synthetic_tiles(sms: int = 132, tiles_per_sm: int = 20_000, seed: int = 0) -> pd.DataFrame:
    """A large synthetic tile trace (tile schema) for size and browser tests: every SM runs back-to-back
    mainloops of 1-3 us; every other tile issues 32 KiB over 0.8 us after its mainloop."""
    n = sms * tiles_per_sm
    rng = np.random.default_rng(seed)
    ml = rng.uniform(1.0, 3.0, n)
    end = np.cumsum(ml.reshape(sms, tiles_per_sm), axis=1).ravel()
    remote = np.arange(n) % 2 == 1
    const = lambda v: pd.Categorical.from_codes(np.zeros(n, np.int8), [v])  # noqa: E731 - cheap string columns
    return pd.DataFrame({
        "source": const("sim"), "platform": const("synthetic"), "experiment": const("moe"),
        "config": const(f"synthetic {sms}x{tiles_per_sm}"), "schedule": const("interleaved"),
        "sm": np.repeat(np.arange(sms, dtype=np.int32), tiles_per_sm),
        "seq": np.tile(np.arange(tiles_per_sm, dtype=np.int32), sms),
        "kind": pd.Categorical.from_codes(remote.astype(np.int8), ["L1", "L2"]),
        "expert": np.int32(0), "m": np.int32(0), "n": np.int32(0),
        "bytes_remote": np.where(remote, 32768.0, 0.0), "mainloop_start(us)": end - ml, "mainloop_end(us)": end,
        "issue_start(us)": end, "issue_end(us)": end + np.where(remote, 0.8, 0.0), "mma_stall(us)": 0.0})
