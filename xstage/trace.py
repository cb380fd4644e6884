"""Chrome trace-event JSON of tile and burst records, for Perfetto (ui.perfetto.dev) or chrome://tracing.

Where it sits in the data flow: records -> trace. It reads one record frame (measured or simulated
alike, the schemas are shared) and imports nothing but ``xstage.records``: no simulator, no
comparison. That is why it lives beside ``xstage.records`` and not in ``compare/``, which joins
measured and simulated data and re-simulates.

Layout of the trace (``ts``/``dur`` in microseconds, the records' own unit):
    tile records   one process per SM (``pid`` = sm + 1, named ``SM <sm>``), threads
                   ``mainloop`` (mainloop_start .. mainloop_end), ``mma stall`` (the MMA's wait for
                   a staging slot, mma_stall(us) before the mainloop, where > 0) and ``store issue``
                   (issue_start .. issue_end: the remote-store span, or the local epilogue of a tile
                   without remote bytes); one complete (``ph: "X"``) event per row and track.
    burst records  one process per producer (``pid`` = producer + 1), thread ``issue``: one event
                   per burst (start .. start + issue).
    X-Stage        one more process (``pid`` = XSTAGE_PID): thread ``runs`` with one event per run,
                   and counter tracks (``ph: "C"``) ``issue rate (GB/s)`` -- the bytes being issued
                   per microsecond, each tile's or burst's bytes spread evenly over its issue span --
                   and ``issued (MiB)``, their running total. These are derived from the records
                   alone. The X-Stage's occupancy is not: it needs the drain rate R, the capacity Q
                   and the admission law, which the records do not hold (recomputing it is
                   re-simulation, the job of ``compare``). For simulated tile records whose
                   metadata carries the replay's summary (``xstage replay moe --out``), thread
                   ``drain`` shows the drain tail: last issue end .. ``drain_end_us``, when the
                   X-Stage is empty again. Per-tile drain times are not in the records.
A file usually holds several runs (configurations x schedules, or burst experiments, told apart by
the kind's ``RUN_KEYS``): they are laid out one after another on the time axis, each shifted to
start ``RUN_GAP_FRACTION`` of the previous run's length after it.
"""

import math

import numpy as np
import pandas as pd

from xstage.errors import InputError
from xstage.records import burst, tile

XSTAGE_PID = 1 << 20
RUN_GAP_FRACTION = 0.05
TIDS = {"tile": {"mainloop": 1, "mma stall": 2, "store issue": 3},
        "burst": {"issue": 1}}
XSTAGE_TIDS = {"runs": 1, "drain": 2}


def _num(x):
    """A JSON-safe scalar (numpy to Python; NaN and inf to None)."""
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _check_times(frame: pd.DataFrame, spans, where: str) -> None:
    """Every start finite and >= 0, every span finite and >= 0; else one InputError naming the row."""
    for start, end in spans:
        s = frame[start].to_numpy(dtype=float)
        e = frame[end].to_numpy(dtype=float) if isinstance(end, str) else s + frame[end[0]].to_numpy(dtype=float)
        name = end if isinstance(end, str) else end[0]
        bad = ~np.isfinite(s) | ~np.isfinite(e) | (s < 0) | (e < s)
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(f"{where} row {i}: {start} .. {name}", (_num(s[i]), _num(e[i])),
                             "must be finite, >= 0 and in order")


def run_groups(frame: pd.DataFrame, kind: str):
    """(label, rows) per run of a tile or burst frame, in order of appearance."""
    module = tile if kind == "tile" else burst
    keys = [k for k in module.RUN_KEYS + module.OPTIONAL_RUN_KEYS if k in frame.columns]
    for values, rows in frame.groupby(keys, sort=False, dropna=False, observed=True):
        values = values if isinstance(values, tuple) else (values,)
        yield ", ".join(f"{k}={_num(v)}" for k, v in zip(keys, values)), rows


def _counters(t0, t1, nbytes, offset) -> list:
    """Counter events: issue rate (GB/s) and running total (MiB) of bytes issued evenly over [t0, t1]."""
    sel = nbytes > 0
    t0, t1, nbytes = t0[sel], t1[sel], nbytes[sel]
    if not len(t0):
        return []
    dur = t1 - t0
    steady = dur > 0
    rate = np.where(steady, nbytes / np.where(steady, dur, 1.0), 0.0)          # bytes / us
    times = np.concatenate([t0, t1])
    delta = np.concatenate([rate, -rate])
    step = np.concatenate([np.where(steady, 0.0, nbytes), np.zeros(len(t1))])  # zero-length issues
    order = np.argsort(times, kind="stable")
    times, delta, step = times[order], delta[order], step[order]
    uniq, first = np.unique(times, return_index=True)
    d_rate = np.add.reduceat(delta, first)
    d_step = np.add.reduceat(step, first)
    level = np.cumsum(d_rate)
    level[np.abs(level) < 1e-9 * max(rate.max(), 1.0)] = 0.0                 # float noise at the end
    total = np.cumsum(d_step + np.concatenate([[0.0], level[:-1] * np.diff(uniq)]))
    events = []
    for t, r, m in zip(uniq + offset, level / 1e3, total / 2**20):
        events.append({"ph": "C", "name": "issue rate (GB/s)", "pid": XSTAGE_PID, "ts": float(t),
                       "args": {"GBps": max(float(r), 0.0)}})
        events.append({"ph": "C", "name": "issued (MiB)", "pid": XSTAGE_PID, "ts": float(t),
                       "args": {"MiB": float(m)}})
    return events


def _x(name, cat, pid, tid, ts, dur, args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": float(ts), "dur": float(dur),
            "args": args}


def _tile_events(rows: pd.DataFrame, offset: float) -> tuple[list, float, float]:
    """(events, end, shift) of one run placed at ``offset``."""
    tids = TIDS["tile"]
    ml0, ml1 = rows["mainloop_start(us)"].to_numpy(float), rows["mainloop_end(us)"].to_numpy(float)
    is0, is1 = rows["issue_start(us)"].to_numpy(float), rows["issue_end(us)"].to_numpy(float)
    stall = np.nan_to_num(rows["mma_stall(us)"].to_numpy(float), nan=0.0)
    stall = np.clip(stall, 0.0, None)
    nbytes = rows["bytes_remote"].to_numpy(float)
    base = min(float(np.min(ml0 - stall)), float(np.min(is0)))
    shift = offset - base
    events = []
    for i, (sm, kind, seq, m, n) in enumerate(zip(rows["sm"], rows["kind"].astype(str), rows["seq"], rows["m"],
                                                   rows["n"])):
        pid = int(sm) + 1
        args = {"seq": _num(seq), "m": _num(m), "n": _num(n),
                "bytes_remote": _num(nbytes[i])}
        events.append(_x(f"{kind} mainloop", "mainloop", pid, tids["mainloop"], ml0[i] + shift, ml1[i] - ml0[i], args))
        store = "remote store" if nbytes[i] > 0 else "local store"
        events.append(_x(f"{kind} {store}", "store", pid, tids["store issue"], is0[i] + shift, is1[i] - is0[i], args))
        if stall[i] > 0:
            events.append(_x("mma stall", "stall", pid, tids["mma stall"], ml0[i] - stall[i] + shift, stall[i],
                             {"seq": _num(seq)}))
    events += _counters(is0, is1, nbytes, shift)
    return events, max(float(np.max(ml1)), float(np.max(is1))) + shift, shift


def _burst_events(rows: pd.DataFrame, offset: float) -> tuple[list, float, float]:
    """(events, end, shift) of one run placed at ``offset``."""
    start, issue = rows["start(us)"].to_numpy(float), rows["issue(us)"].to_numpy(float)
    nbytes = rows["bytes_per_producer"].to_numpy(float)
    shift = offset - float(np.min(start))
    events = [_x("burst", "issue", int(p) + 1, TIDS["burst"]["issue"], start[i] + shift, issue[i],
                 {"burst": _num(b), "bytes": _num(nbytes[i]), "period(us)": _num(per)})
              for i, (p, b, per) in enumerate(zip(rows["producer"], rows["burst"], rows["period(us)"]))]
    events += _counters(start, start + issue, nbytes, shift)
    return events, float(np.max(start + issue)) + shift, shift


def _metadata(pids: dict, kind: str) -> list:
    """process_name / process_sort_index / thread_name events for every process and track."""
    out = []
    procs = {**pids, XSTAGE_PID: "X-Stage"}
    for pid, name in procs.items():
        out.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": -1 if pid == XSTAGE_PID else pid}})
        for track, tid in (XSTAGE_TIDS if pid == XSTAGE_PID else TIDS[kind]).items():
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": track}})
    return out


def trace(frame: pd.DataFrame, kind: str, meta: dict | None = None, *, where: str = "records") -> dict:
    """The trace-event document ({"traceEvents": [...], ...}) of a tile or burst record frame."""
    if kind not in TIDS:
        raise InputError(f"{where}: kind", kind, "must be tile or burst")
    if frame.empty:
        raise InputError(where, "no rows", "must hold at least one row")
    if kind == "tile":
        _check_times(frame, [("mainloop_start(us)", "mainloop_end(us)"), ("issue_start(us)", "issue_end(us)")], where)
        pids = {int(s) + 1: f"SM {int(s)}" for s in sorted(frame["sm"].unique())}
    else:
        _check_times(frame, [("start(us)", ("issue(us)",))], where)
        pids = {int(p) + 1: f"producer {int(p)}" for p in sorted(frame["producer"].unique())}
    summary = (meta or {}).get("summary") or {}
    groups = list(run_groups(frame, kind))
    drain_end = summary.get("drain_end_us")        # a replay's summary: one simulated run per file
    drain = kind == "tile" and len(groups) == 1 and (frame["source"] == "sim").all() and drain_end is not None
    events, cursor, runs = [], 0.0, 0
    for run, rows in groups:
        part, end, shift = (_tile_events if kind == "tile" else _burst_events)(rows, cursor)
        events += part
        events.append(_x(run, "run", XSTAGE_PID, XSTAGE_TIDS["runs"], cursor, end - cursor, {"rows": len(rows)}))
        last = float(rows["issue_end(us)"].max()) if drain else math.inf
        if drain and float(drain_end) > last:
            events.append(_x("X-Stage drain", "drain", XSTAGE_PID, XSTAGE_TIDS["drain"], last + shift,
                             float(drain_end) - last, {"drain_end_us": float(drain_end)}))
        cursor = end + RUN_GAP_FRACTION * max(end - cursor, 1.0)
        runs += 1
    return {"traceEvents": _metadata(pids, kind) + events,
            "otherData": {"xstage_kind": kind, "rows": int(len(frame)), "runs": runs}}
