"""The microbenchmark's self-test on a GPU: timer tick, the pattern checks in every mode and gap kind,
and a corrupted word that the check must catch (on the CPU for the host target, else on the device
through the same mapping). ``python -m xstage.hw.microbench.runner --selftest`` runs it
(flags: ``xstage.cli.bench_microbench``).
"""

from dataclasses import asdict

from xstage.hw.microbench.pattern import MicrobenchError, check_pattern
from xstage.hw.microbench.runner import Microbench
from xstage.hw.microbench.spec import BurstSpec
from xstage.records.spelling import json_key
from xstage.sim.burst_summary import summarize_run
from xstage.hw.common.log import hw_log


def selftest(target_name: str = "host", small: bool = False, timeout_ms: float = 2000.0,
             peer_pattern: str = "next") -> dict:
    """Timer tick, pattern checks in both modes and all gap kinds, and a corruption check (on the
    CPU for the host target, else on the device: a word flipped through the same mapping)."""
    from xstage.hw.common.targets import open_target

    out = {"target": target_name}
    K = 4 if small else 16
    target = open_target(target_name, 4 * 64 * 1024 * (132 if not small else 8), self_peer=True,
                         peer_pattern=peer_pattern)
    if target.name == "peer":
        out.update(peer_pattern=target.pattern, rank=target.info["rank"], world_size=target.info["world_size"])
    try:
        mb = Microbench(target, timeout_ms=timeout_ms)
        out["timer"] = mb.probe_timer(reads=1024 if small else 4096, span_us=500 if small else 2000)
        hw_log(f"[selftest] %globaltimer tick {out['timer']['tick_ns']:.0f} ns, distinct deltas "
              f"{out['timer']['distinct_deltas_ns']}, SM clock {out['timer']['sm_clock_GHz']:.3f} GHz, "
              f"timebase {out['timer']['timebase']}")
        runs = []
        for spec in (BurstSpec(K, 4096, 0.0, bursts=6, trials=1),
                     BurstSpec(K, 4096, 1.0, mode="free", bursts=6, trials=1),
                     BurstSpec(K, 8192, 2.0, mode="isolated", bursts=5, trials=1, settle_us=2.0),
                     BurstSpec(K, 4096, 3.0, gap_kind="clock", bursts=5, trials=1),
                     BurstSpec(K, 4096, gap_kind="fma", fma_iters=200, bursts=5, trials=1),
                     BurstSpec(min(mb.sm_count, 8 if small else 132), 16384, 0.0, bursts=8, trials=1)):
            frame, info = mb.run(spec, cpu_verify=True)
            runs.append({**{k: v for k, v in asdict(spec).items() if k in ("producers", "bytes_per_producer",
                                                                       "mode", "gap_kind")},
                         **{json_key(k): v for k, v in summarize_run(frame).items()}, "verified_words": info["verified_words"]})
            hw_log(f"[selftest] ok {runs[-1]}")
        out["runs"] = runs
        # the check must catch a lost store: corrupt one word after a run, then check again (on the
        # CPU for the host target; on the device, through the same mapping, for the others)
        spec = BurstSpec(K, 4096, 0.0, bursts=3, trials=1, warmup=0)
        mb.run(spec)
        try:
            if target.host_view() is not None:
                view = target.host_view()
                view[4 * 5 + 2] ^= 1
                check_pattern(view[: mb.slots_for(spec) * K * spec.words_per_producer * 4], K,
                              spec.words_per_producer, mb.slots_for(spec), spec.bursts)
            else:
                mb.corrupt_word(spec, word=5, lane=2, mask=1)
                mb.verify(spec)
        except MicrobenchError as err:
            out["corruption_caught"] = str(err)
        else:
            raise MicrobenchError("a corrupted word was NOT caught by the pattern check")
        hw_log(f"[selftest] corrupted word caught: {out['corruption_caught'][:80]}...")
    finally:
        target.close()
    return out
