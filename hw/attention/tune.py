"""The attention kernel configuration a run times: FA-only tuned over ``TUNE_CANDIDATES`` at one M
(``tune``), then the fused send option picked among ``FUSED_OPTIONS`` by the Fused time (``pick_fused``;
W ranks: by the slowest rank).
"""

from dataclasses import replace

from xstage.hw.attention.config import FUSED_FIELDS, AttentionConfig
from xstage.hw.attention.variants import FUSED_OPTIONS, fused_options, fused_tag, random_qkv, reference
from xstage.hw.common.timing import device, sync, time_variants
from xstage.records.attention import kernel_row
from xstage.hw.common.log import hw_log

TUNE_CANDIDATES = (  # (block_n, num_stages, tma, num_warps, programs per SM) for d = 128, block_m = 128
    (64, 3, False, 8, 1), (128, 2, False, 8, 1), (64, 3, True, 8, 1), (128, 2, True, 8, 1), (64, 4, True, 8, 1),
    (128, 3, True, 8, 1), (32, 3, True, 4, 2))


def tune(M: int = 16384, heads: int = 3, head_dim: int = 128, world: int = 8, trials: int = 20) -> tuple:
    """FA-only time of each ``TUNE_CANDIDATES`` configuration at M, with the split tail (as the fused
    options that win use it); returns (fastest cfg, rows).

    A candidate that fails to compile or run, or gives a wrong result, is dropped."""
    import torch

    from xstage.hw.attention import kernel as A

    base = AttentionConfig(M, heads, head_dim, world, split_tail=True)
    q, k, v = random_qkv(base, 1)
    ref = None
    out = torch.empty_like(q)
    fns, cfgs = {}, {}
    sms = torch.cuda.get_device_properties(0).multi_processor_count if device() == "cuda" else 4
    for bn, st, tma, warps, per_sm in TUNE_CANDIDATES:
        cfg = replace(base, block_n=bn, num_stages=st, tma=tma, num_warps=warps,
                      programs=0 if per_sm == 1 else per_sm * sms)
        fn = lambda c=cfg: A.launch_fa(q, k, v, c, out=out)  # noqa: E731
        try:
            out.fill_(float("nan"))
            fn()
            sync()
            ref = reference(q, k, v) if ref is None else ref
            res = A.compare(out, ref)
        except Exception as err:  # noqa: BLE001 - e.g. a candidate that does not fit shared memory
            hw_log(f"  tune: {cfg.label()} failed: {type(err).__name__}: {str(err)[:300]}")
            continue
        if not res["ok"]:
            hw_log(f"  tune: {cfg.label()} wrong result {res}")
            continue
        cfgs[cfg.label()], fns[cfg.label()] = cfg, fn
    if not fns:
        return base, []
    times, _ = time_variants(fns, trials=trials, warmup=2, rounds=4)
    rows = [kernel_row(cfgs[name], "fa_tune", t) for name, t in times.items()]
    for r in sorted(rows, key=lambda r: r["time(us)"]):
        hw_log(f"  tune: {r['config']}: {r['time(us)']:.1f} us, {r['compute(TFLOPs)']:.0f} TFLOP/s")
    best = min(rows, key=lambda r: r["time(us)"])
    return cfgs[best["config"]], rows


def pick_fused(cfg, trials: int = 10, *, table=None, reduce_rows=None, verbose: bool = True, **timing) -> tuple:
    """Time Fused at ``cfg.seq_len`` with each ``FUSED_OPTIONS`` (store cache, drip, split tail); returns (fastest
    cfg, rows).

    ``table``: the destination table (default: emulated destinations); ``reduce_rows(rows) -> rows``
    (W ranks: every rank's times reduced); ``timing``: keyword arguments of ``time_variants``."""
    from xstage.hw.attention import kernel as A

    q, k, v = random_qkv(cfg, 1)
    if table is None:
        dests = A.Destinations.emulated(cfg.layout, device())
        table = dests.table
    cfgs = {fused_tag(*opt): fused_options(cfg, opt) for opt in FUSED_OPTIONS}
    fns = {tag: (lambda c=c: A.launch_fa(q, k, v, c, dest_table=table)) for tag, c in cfgs.items()}
    times, _ = time_variants(fns, trials=trials, warmup=2, rounds=2, **timing)
    rows = [kernel_row(cfgs[tag], "fused_tune", t, **{f: getattr(cfgs[tag], f) for f in FUSED_FIELDS})
            for tag, t in times.items()]
    rows = reduce_rows(rows) if reduce_rows else rows
    for r in sorted(rows, key=lambda r: r["time(us)"]) if verbose else ():
        hw_log(f"  fused {r['config']}: {r['time(us)']:.1f} us")
    best = min(rows, key=lambda r: r["time(us)"])
    return next(c for c in cfgs.values() if c.label() == best["config"]), rows
