"""The timing harness every GPU experiment uses: CUDA events around CUDA-graph replays.

``time_variants`` times several variants of one configuration: warm-up, graph capture (eager where the
capture fails), then rounds in rotated order, each a batch of trials queued behind a GPU sleep so the
host never starves the device; per-trial times in us. ``paired_differences`` times a variant against a
base in back-to-back pairs (alternating which goes first, or in a given order), so slow clock drift cancels in
the difference. ``gpu_clocks`` reads SM/memory clocks, temperature, power and throttle reasons
(nvidia-smi) for the records. ``device()`` is "cpu" under the Triton interpreter or without a GPU (the
dry runs time with the host clock). torch is imported inside the functions.
"""

import subprocess
import time

from xstage.errors import InputError
from xstage.hw.common.log import hw_log

SMI_FIELDS = "clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active"


def gpu_clocks() -> str:
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unavailable"


def interpreting() -> bool:
    """True when Triton kernels run in the interpreter (TRITON_INTERPRET=1); False without triton."""
    try:
        from triton import knobs
    except ImportError:
        return False
    return bool(knobs.runtime.interpret)


def device() -> str:
    """"cuda", or "cpu" under the Triton interpreter or without a GPU (a dry run at tiny sizes)."""
    import torch

    return "cpu" if interpreting() or not torch.cuda.is_available() else "cuda"


def sync() -> None:
    """Wait for the device (no-op on the CPU)."""
    import torch

    if device() == "cuda":
        torch.cuda.synchronize()


def capture(fn, capture_error_mode: str = "global"):
    """Return a replay callable: a CUDA graph of ``fn`` (eager ``fn`` if capture fails) and the mode.

    ``capture_error_mode`` as ``torch.cuda.graph``'s ("thread_local" where other threads, e.g. NCCL's
    watchdog, make CUDA calls during the capture)."""
    import torch

    if device() == "cpu":
        return fn, "eager"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode=capture_error_mode):
            fn()
        sync()
        return graph.replay, "graph"
    except Exception as err:  # noqa: BLE001 - any capture failure falls back to eager timing
        sync()
        hw_log(f"  graph capture failed ({type(err).__name__}: {err}); timing eagerly")
        return fn, "eager"


def time_variants(fns: dict, trials: int = 25, warmup: int = 5, rounds: int = 5, *, capture_fn=capture,
                  barrier=None) -> tuple:
    """Per-trial device times (us) of every variant: {name: [us]}, {name: "graph" | "eager"}.

    ``capture_fn(fn) -> (replay, mode)``; ``barrier()``, when given, runs on the host before each
    variant's warm-up and before each round's trials of a variant, outside the timed window (W ranks)."""
    import torch

    barrier = barrier or (lambda: None)
    replays, modes = {}, {}
    for name, fn in fns.items():
        barrier()
        for _ in range(warmup):
            fn()
        sync()
        replays[name], modes[name] = capture_fn(fn)
        for _ in range(2):
            replays[name]()
    sync()
    names = list(replays)
    per_round = -(-trials // rounds)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if device() == "cpu":  # dry run: host clock
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    replays[name]()
                    times[name].append((time.perf_counter() - t0) * 1e6)
                continue
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(per_round)]
            barrier()
            torch.cuda._sleep(20_000_000)  # keep the GPU busy while the host queues the trials
            for start, end in events:
                start.record()
                replays[name]()
                end.record()
            sync()
            times[name] += [start.elapsed_time(end) * 1e3 for start, end in events]
    return times, modes


def paired_differences(base, others: dict, pairs: int = 30, *, capture_fn=capture, marks: list | None = None,
                       raw: list | None = None, order: list | None = None, warm: int = 0) -> dict:
    """{name: [us]}: per pair, the device time of ``others[name]`` minus that of ``base``, the two
    launched back to back (which one goes first alternates, base first in pair 0; or, with ``order``, a list of
    ``pairs`` booleans, pair i's base goes first where ``order[i]`` is true). Slow clock drift (DVFS, temperature)
    moves both launches of a pair alike, so it cancels in the difference — the paper's matched-path
    comparison; a difference of two medians taken seconds apart does not cancel it.

    ``marks``, when a list, gets one ``{"variant", "host_start_s", "host_end_s", "pairs"}`` per variant: the host's
    wall clock (``time.time()``) before its pairs are queued and after they finished, so that a clock trace taken
    beside (``nvidia-smi -lms``) gives the SM clock and throttle state while that variant's pairs ran. The timing
    itself is unchanged.

    ``raw``, when a list, gets one ``{"variant", "pair", "base_first", "base_us", "other_us"}`` per pair: the two
    launches' own device times, from which the differences above follow (``other_us - base_us``).

    ``warm``: untimed pairs (base then other) queued on the stream after the host-queueing wait and right before
    each variant's timed pairs, so that the GPU reaches the timed pairs from back-to-back launches, not from idle."""
    import torch

    if int(warm) < 0:
        raise InputError("warm", warm, "must be >= 0")
    if order is not None and len(order) != pairs:
        raise InputError("order", f"{len(order)} entries", f"must give one boolean per pair (pairs={pairs})")
    base_first = [i % 2 == 0 for i in range(pairs)] if order is None else [bool(x) for x in order]
    replays = {name: capture_fn(fn)[0] for name, fn in {"__base__": base, **others}.items()}
    diffs = {name: [] for name in others}
    if device() == "cpu":
        if marks is not None:
            now = time.time()
            marks += [{"variant": name, "host_start_s": now, "host_end_s": now, "pairs": 0} for name in others]
        return {name: [0.0] for name in others}
    for name in others:
        t0 = time.time()
        events = [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in range(pairs)]
        torch.cuda._sleep(20_000_000)  # keep the GPU busy while the host queues the pairs
        for _ in range(int(warm)):
            replays["__base__"]()
            replays[name]()
        for i, ev in enumerate(events):
            first, second = replays["__base__"], replays[name]
            if not base_first[i]:
                first, second = second, first
            ev[0].record()
            first()
            ev[1].record()
            second()
            ev[2].record()
        sync()
        if marks is not None:
            marks.append({"variant": name, "host_start_s": t0, "host_end_s": time.time(), "pairs": pairs})
        for i, ev in enumerate(events):
            t_first, t_second = ev[0].elapsed_time(ev[1]) * 1e3, ev[1].elapsed_time(ev[2]) * 1e3
            diffs[name].append(t_second - t_first if base_first[i] else t_first - t_second)
            if raw is not None:
                b, o = (t_first, t_second) if base_first[i] else (t_second, t_first)
                raw.append({"variant": name, "pair": i, "base_first": base_first[i], "base_us": b, "other_us": o})
    return diffs
