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


def word_index(cta: int, slot: int, field: int, slots: int) -> int:
    """The kernel's index of one word (``TileLog.log_ptr``)."""
    return (cta * slots + slot) * len(LOG_FIELDS) + field


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
    spread (``wave_drain``) and the queue replay of all remote sends (``queue_replay``)."""
    if cols["slot"].size == 0:
        raise ValueError("tile log: no slot was written")
    grid = int(np.unique(cols["cta"]).size)
    waves = wave_spreads(cols)
    last = int(cols["slot"].max())
    out = {"ctas": grid, "units": int(cols["slot"].size), "slots": last + 1,
           "compute_span_us": float(cols["end_ns"].max() - cols["start_ns"].min()) / 1e3,
           "drift": drift_per_wave(waves, grid), "waves": waves,
           "last_wave": wave_drain(cols, last, blocks, world, rank, gbps),
           "queue": queue_replay(cols, blocks, world, rank, gbps)}
    if last >= 1:
        out["second_last_wave"] = wave_drain(cols, last - 1, blocks, world, rank, gbps)
    return out
