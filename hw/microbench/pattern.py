"""What the microbenchmark kernel must have written, and its timer's resolution: the numpy twins the
runner checks every trial against (``microbench.cu``'s ``pattern_word``; the timer probe's reads).

Every 16-byte word holds (producer, burst, offset, hash); a slot holds the last burst that wrote it
(bursts write slot b % slots). ``check_pattern`` raises ``MicrobenchError`` on the first wrong word.
"""

import numpy as np

_PATTERN_SEED = (0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F)


class MicrobenchError(RuntimeError):
    """The kernel reported an error, or the target buffer does not hold the expected pattern."""


def pattern_words(producer, burst, offset) -> np.ndarray:
    """uint32 [..., 4] words (producer, burst, offset, hash), broadcast over the inputs."""
    p, b, i = (np.asarray(x, dtype=np.uint32) for x in (producer, burst, offset))
    p, b, i = np.broadcast_arrays(p, b, i)
    with np.errstate(over="ignore"):
        h = (np.uint32(_PATTERN_SEED[0]) ^ (p * np.uint32(_PATTERN_SEED[1]))
             ^ (b * np.uint32(_PATTERN_SEED[2])) ^ (i * np.uint32(_PATTERN_SEED[3])))
    return np.stack([p, b, i, h.astype(np.uint32)], axis=-1)


def last_burst_of_slot(slot: int, slots: int, bursts: int) -> int | None:
    """The last burst that wrote ``slot`` (bursts write slot b % slots), None if none did."""
    if slot >= bursts:
        return None
    return slot + ((bursts - 1 - slot) // slots) * slots


def expected_buffer(producers: int, words_per_producer: int, slots: int, bursts: int, tags=None) -> np.ndarray:
    """The uint32 [slots, K, W, 4] contents after a run (zeros where no burst wrote). ``tags``: the
    pattern tag of each of the K rows (default: the row itself; `NO_PRODUCER`: a row nobody writes),
    as in one destination region of the all-to-all peer pattern (`targets.PeerLayout.tags`)."""
    from xstage.hw.common.targets import NO_PRODUCER
    out = np.zeros((slots, producers, words_per_producer, 4), dtype=np.uint32)
    rows = np.arange(producers) if tags is None else np.asarray(tags, dtype=np.uint32)
    written = rows != NO_PRODUCER
    p = rows[written][:, None]
    i = np.arange(words_per_producer)[None, :]
    for s in range(slots):
        b = last_burst_of_slot(s, slots, bursts)
        if b is not None:
            out[s, written] = pattern_words(p, b, i)
    return out


def check_pattern(words: np.ndarray, producers: int, words_per_producer: int, slots: int, bursts: int,
                  tags=None) -> None:
    """Raise MicrobenchError unless ``words`` (uint32, any shape) equals the expected contents."""
    want = expected_buffer(producers, words_per_producer, slots, bursts, tags).reshape(-1, 4)
    got = np.asarray(words, dtype=np.uint32).reshape(-1)[: want.size].reshape(-1, 4)
    if got.shape != want.shape:
        raise MicrobenchError(f"pattern check: buffer holds {got.shape[0]} words, expected {want.shape[0]}")
    bad = np.flatnonzero((got != want).any(axis=1))
    if bad.size:
        g = int(bad[0])
        raise MicrobenchError(f"pattern check failed: {bad.size} of {want.shape[0]} 16-byte words wrong; "
                              f"first at word {g}: got {got[g].tolist()}, want {want[g].tolist()}")


def tick_from_reads(gt_ns: np.ndarray) -> dict:
    """%globaltimer resolution from consecutive reads in a tight loop: distinct deltas and the tick."""
    d = np.diff(np.asarray(gt_ns, dtype=np.int64))
    pos = d[d > 0]
    if pos.size == 0:
        raise MicrobenchError("%globaltimer did not advance during the probe")
    values, counts = np.unique(pos, return_counts=True)
    order = np.argsort(-counts)[:8]
    return {
        "tick_ns": float(pos.min()),
        "median_step_ns": float(np.median(pos)),
        "zero_delta_fraction": float((d == 0).mean()),
        "resolved": bool((d == 0).mean() > 0.0),  # reads faster than the tick: every step is one tick
        "distinct_deltas_ns": {int(values[k]): int(counts[k]) for k in order},
        "reads": int(len(gt_ns)),
    }
