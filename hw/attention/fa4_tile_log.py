"""The PersistentSm90 tile log: its buffer layout, decoding, and the per-wave figures drawn from it (no GPU library).

The logged kernels (``fa4_tile_log_kernel.logged_class``; ``fa4.load_persistent(..., tile_log=buf)``) write, per
CTA ``c`` and slot ``k`` (the k-th unit that CTA runs: with grid-stride schedulers unit c + k·grid, so slot k is
wave k), ``len(LOG_FIELDS)`` int64 words at ``word_index(c, k, field, slots)`` of a zeroed int64 buffer of shape
(sms, slots, len(LOG_FIELDS)): %globaltimer (ns) at the mainloop start, mainloop end and send issue, then the
tile's m_block, head, batch, the SM it ran on and its split word (FA4's packed ``parts << 16 | half``: 1 << 16 for
a whole tile). A zero ``end_ns`` is a slot the CTA did not run; a zero ``send_ns`` a unit that sent nothing
(a split partner). The same arithmetic as the kernel, on numpy arrays, so the tests can check it on synthetic stamps.
"""

import numpy as np

LOG_FIELDS = ("start_ns", "end_ns", "send_ns", "m_block", "head", "batch", "sm", "split_word")
FIELD = {f: i for i, f in enumerate(LOG_FIELDS)}
DEFAULT_SLOTS = 16  # >= the most units a CTA runs here (64K, 3 heads, split last wave: 13)
TILE_BYTES = 128 * 128 * 2  # one 128 x 128 bf16 O tile
PARTNER_WORD = 2 << 16  # split word of a partner unit (K/V half 0 of a split tile): it sends nothing
WHOLE_WORD = 1 << 16  # split word of a whole tile


def word_index(cta: int, slot: int, field: int, slots: int) -> int:
    """The kernel's index of one word (``TileLog.log_ptr``)."""
    return (cta * slots + slot) * len(LOG_FIELDS) + field


def check_tile_log(buf, sms: int) -> tuple:
    """(address, slots) of a tile-log buffer for ``fa4_persistent.installed``: a contiguous int64 tensor (sms, slots,
    fields), zeroed by the caller; refuses another shape or dtype (ValueError)."""
    shape = tuple(buf.shape)
    if len(shape) != 3 or shape[0] != sms or shape[2] != len(LOG_FIELDS) or shape[1] < 1:
        raise ValueError(f"tile_log shape {shape}: must be ({sms}, slots, {len(LOG_FIELDS)})")
    if str(buf.dtype) != "torch.int64" or not buf.is_contiguous():
        raise ValueError(f"tile_log dtype {buf.dtype}: must be a contiguous torch.int64 tensor")
    return buf.data_ptr(), shape[1]


def decode(buf) -> dict:
    """Columns (numpy arrays) of the slots a run wrote, from a (ctas, slots, fields) or flat int64 buffer of
    known shape: ``cta``, ``slot`` and every ``LOG_FIELDS`` column."""
    a = np.asarray(buf, dtype=np.int64)
    if a.ndim != 3 or a.shape[2] != len(LOG_FIELDS):
        raise ValueError(f"tile log shape {a.shape}: must be (ctas, slots, {len(LOG_FIELDS)})")
    cta, slot = np.nonzero(a[:, :, FIELD["end_ns"]])
    cols = {"cta": cta.astype(np.int64), "slot": slot.astype(np.int64)}
    for f, i in FIELD.items():
        cols[f] = a[cta, slot, i]
    return cols


def _iqr(x) -> float:
    q1, q3 = np.percentile(x, [25, 75])
    return float(q3 - q1)


def wave_spreads(cols: dict) -> list:
    """Per slot (wave): units, the CTA end times' range and IQR (us, over the CTAs that ran that slot), the
    median mainloop (end - start, us) and the send issue times' range (us)."""
    out = []
    for k in np.unique(cols["slot"]):
        m = cols["slot"] == k
        end = cols["end_ns"][m] / 1e3
        sent = cols["send_ns"][m]
        sent = sent[sent > 0] / 1e3
        out.append({"slot": int(k), "units": int(m.sum()), "end_range_us": float(np.ptp(end)),
                    "end_iqr_us": _iqr(end),
                    "mainloop_us": float(np.median((cols["end_ns"][m] - cols["start_ns"][m]) / 1e3)),
                    "send_range_us": float(np.ptp(sent)) if sent.size else 0.0})
    return out


def drift_per_wave(waves: list, grid: int) -> dict:
    """The growth of the end-time range and IQR per wave over the full waves (every CTA ran the slot):
    least-squares slopes (us / wave), and each as a fraction of the median mainloop (the predictor's
    ``program_spread`` is the range's growth per wave over the Q-loop)."""
    full = [w for w in waves if w["units"] == grid]
    if len(full) < 2:
        return {"full_waves": len(full), "range_slope_us": None, "iqr_slope_us": None,
                "range_per_wave": None, "iqr_per_wave": None}
    k = np.array([w["slot"] for w in full], dtype=float)
    loop = float(np.median([w["mainloop_us"] for w in full]))
    r = float(np.polyfit(k, [w["end_range_us"] for w in full], 1)[0])
    q = float(np.polyfit(k, [w["end_iqr_us"] for w in full], 1)[0])
    return {"full_waves": len(full), "range_slope_us": r, "iqr_slope_us": q, "mainloop_us": loop,
            "range_per_wave": r / loop, "iqr_per_wave": q / loop}


def mainloop_excess(cols: dict) -> dict:
    """How much longer the whole-tile mainloops of each later wave run than wave 0's (medians over the CTAs, us),
    within one launch (the same clocks): in a fused run, wave k >= 1 computes while wave k - 1's sends drain, wave 0
    while none is in flight. ``per_wave_us``: the mean over waves 1.., ``sum_us``: their sum."""
    whole = cols["split_word"] == WHOLE_WORD
    loops = {}
    for k in np.unique(cols["slot"][whole]):
        m = whole & (cols["slot"] == k)
        loops[int(k)] = float(np.median((cols["end_ns"][m] - cols["start_ns"][m]) / 1e3))
    ex = [loops[k] - loops[0] for k in sorted(loops) if k > 0] if 0 in loops else []
    return {"per_wave_us": float(np.mean(ex)) if ex else None, "sum_us": float(np.sum(ex)) if ex else None}


def finish_spread(cols: dict) -> float:
    """How much later the last CTA's last mainloop ends than the median CTA's (us): the kernel waits for it."""
    last = {}
    for c, e in zip(cols["cta"].tolist(), cols["end_ns"].tolist()):
        last[c] = max(last.get(c, e), e)
    ends = np.array(list(last.values()), dtype=float) / 1e3
    return float(ends.max() - np.median(ends)) if ends.size else 0.0


def remote(cols: dict, blocks: int, world: int, rank: int):
    """Mask of the units whose send goes to another rank (m_block outside this rank's chunk; partners send nothing)."""
    chunk = blocks // world
    own = (cols["m_block"] >= rank * chunk) & (cols["m_block"] < (rank + 1) * chunk)
    return ~own & (cols["split_word"] != PARTNER_WORD) & (cols["send_ns"] > 0)


def wave_drain(cols: dict, slot: int, blocks: int, world: int, rank: int, gbps: float) -> dict:
    """One wave's remote sends: count, bytes, their drain at ``gbps`` GB/s (us), its end-time range and the range of
    its sends' issue times (us)."""
    m = cols["slot"] == slot
    r = m & remote(cols, blocks, world, rank)
    nbytes = int(r.sum()) * TILE_BYTES
    end = cols["end_ns"][m] / 1e3
    sent = cols["send_ns"][r] / 1e3
    return {"slot": int(slot), "units": int(m.sum()), "remote_sends": int(r.sum()), "remote_bytes": nbytes,
            "drain_us": nbytes / (gbps * 1e3), "end_range_us": float(np.ptp(end)) if end.size else 0.0,
            "end_iqr_us": _iqr(end) if end.size else 0.0,
            "send_range_us": float(np.ptp(sent)) if sent.size else 0.0}


def queue_replay(cols: dict, blocks: int, world: int, rank: int, gbps: float) -> dict:
    """The remote sends at their logged issue times through one FIFO link of ``gbps`` GB/s: when the link is done,
    relative to the last mainloop end (us; > 0: bytes still draining after the compute ended: the residual a
    pure bandwidth queue gives for these issue times), and how many sends finish after the last mainloop end."""
    r = remote(cols, blocks, world, rank)
    t = np.sort(cols["send_ns"][r]) / 1e3
    per = TILE_BYTES / (gbps * 1e3)
    end = float(cols["end_ns"].max()) / 1e3
    free, unfinished = -np.inf, 0
    for s in t:
        free = max(free, s) + per
        unfinished += free > end
    return {"remote_sends": int(t.size), "link_done_after_end_us": (free - end) if t.size else 0.0,
            "unfinished_at_end_sends": int(unfinished)}


def launch_summary(cols: dict, blocks: int, world: int, rank: int, gbps: float) -> dict:
    """The figures of one logged launch: the compute span (first mainloop start to last mainloop end, us), the
    per-wave drift (``drift_per_wave``), the last and the second-to-last wave's remote drain against their end
    spread (``wave_drain``), the later waves' mainloop stretch (``mainloop_excess``) and the queue replay of all
    remote sends (``queue_replay``)."""
    if cols["slot"].size == 0:
        raise ValueError("tile log: no slot was written")
    t0 = int(cols["start_ns"].min())  # %globaltimer is ~1.7e18 ns: in us as float64 that would keep 0.25 us steps
    cols = dict(cols, start_ns=cols["start_ns"] - t0, end_ns=cols["end_ns"] - t0,
                send_ns=np.where(cols["send_ns"] > 0, cols["send_ns"] - t0 + 1, 0))  # + 1 ns: a send stays > 0
    grid = int(np.unique(cols["cta"]).size)
    waves = wave_spreads(cols)
    last = int(cols["slot"].max())
    out = {"ctas": grid, "units": int(cols["slot"].size), "slots": last + 1,
           "compute_span_us": float(cols["end_ns"].max() - cols["start_ns"].min()) / 1e3,
           "finish_spread_us": finish_spread(cols),
           "drift": drift_per_wave(waves, grid), "mainloop_excess": mainloop_excess(cols), "waves": waves,
           "last_wave": wave_drain(cols, last, blocks, world, rank, gbps),
           "queue": queue_replay(cols, blocks, world, rank, gbps)}
    if last >= 1:
        out["second_last_wave"] = wave_drain(cols, last - 1, blocks, world, rank, gbps)
    return out


def record_columns(cols: dict, *, M: int, kernel: str, mode: str, launch: int, launch_us: float, world: int,
                   rank: int, platform: str) -> dict:
    """One logged launch as columns of the project's tile records (``xstage.records.tile``; one row per unit, times
    in us from the launch's first mainloop start; ``issue_start(us)`` = the send issue, NaN for a unit that sent
    nothing; ``issue_end(us)`` and ``mma_stall(us)`` are not logged: NaN; ``bytes_remote``: the tile's bytes where
    the fused run sends it to another rank). Beside them: kernel, mode, launch, program (the CTA), tile (its unit
    index cta + slot·ctas), the split word, batch, M and the launch's event time. ``stamp_columns`` reads them back."""
    n = cols["slot"].size
    t0 = int(cols["start_ns"].min())
    grid = int(np.unique(cols["cta"]).size)
    rem = remote(cols, M // 128, world, rank) if mode == "fused" else np.zeros(n, dtype=bool)
    send = np.where(cols["send_ns"] > 0, (cols["send_ns"] - t0) / 1e3, np.nan)
    nan = np.full(n, np.nan)
    return {"source": ["hw"] * n, "platform": [platform] * n, "experiment": ["attention-fa4-tilelog"] * n,
            "config": [f"M={M},H=3,d=128,W={world},kernel={kernel}"] * n, "schedule": [f"{mode}/{launch}"] * n,
            "sm": cols["sm"], "seq": cols["slot"], "kind": ["FA"] * n, "expert": np.full(n, -1), "m": cols["m_block"],
            "n": cols["head"], "bytes_remote": np.where(rem, TILE_BYTES, 0),
            "mainloop_start(us)": (cols["start_ns"] - t0) / 1e3, "mainloop_end(us)": (cols["end_ns"] - t0) / 1e3,
            "issue_start(us)": send, "issue_end(us)": nan, "mma_stall(us)": nan.copy(), "kernel": [kernel] * n,
            "mode": [mode] * n, "launch": np.full(n, launch), "program": cols["cta"],
            "tile": cols["cta"] + cols["slot"] * grid, "split_word": cols["split_word"], "batch": cols["batch"],
            "M": np.full(n, M), "launch(us)": np.full(n, launch_us)}


def stamp_columns(frame) -> dict:
    """``decode``'s columns back from one launch's tile records (times in ns from its first mainloop start; a unit
    that sent nothing has send_ns 0)."""
    ns = {f: np.rint(np.asarray(frame[c], dtype=float) * 1e3) for f, c in
          (("start_ns", "mainloop_start(us)"), ("end_ns", "mainloop_end(us)"), ("send_ns", "issue_start(us)"))}
    cols = {"cta": np.asarray(frame["program"], dtype=np.int64), "slot": np.asarray(frame["seq"], dtype=np.int64)}
    for f, v in ns.items():
        cols[f] = np.nan_to_num(v, nan=0.0).astype(np.int64)
    for f, c in (("m_block", "m"), ("head", "n"), ("batch", "batch"), ("sm", "sm"), ("split_word", "split_word")):
        cols[f] = np.asarray(frame[c], dtype=np.int64)
    return cols
