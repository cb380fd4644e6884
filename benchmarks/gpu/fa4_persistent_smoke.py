"""Smoke check of PersistentSm90 (hw/attention/fa4_persistent.py) on one GPU before the FA4 sweep uses it.

    python3 benchmarks/gpu/fa4_persistent_smoke.py --out $OUT/fa4-persistent-smoke.json   # under timeout

Per M: fresh random inputs; stock FA4 and PersistentSm90 into NaN-poisoned HBM outputs; every element
written, PersistentSm90 against stock FA4 (bitwise flag, max |diff|) and both against a float32 reference on
three row slices; then a short CUDA-event timing of both (median of 20, for orientation only: the sweep's
matched pairs are the measurement), and once more into a poisoned output after the timing (bitwise again). Writes one JSON file (with provenance); exit status 1 if a check failed.
The split kernel ("staggersplit": its last partial wave's tiles merged from two K/V halves, another summation
order) is held to the float32 reference and the 1e-2 bound against stock FA4, its whole tiles to bitwise equality
with stock FA4; after the timing it must repeat its own first output bitwise, then (flags reset?) run on fresh
random inputs against the reference again; no owner may have timed out (``split_timeouts``).
"""

import argparse
import json
import sys
import time
import traceback


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seq-lens", default="8192,16384")
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--kernels", default="drain", help="fa4_persistent kernels (comma list; drain first)")
    p.add_argument("--passed", default="", help="write the comma list of the kernels that passed to this file")
    args = p.parse_args(argv)
    import torch

    from xstage.hw.attention import fa4
    from xstage.hw.attention import fa4_persistent as P
    from xstage.hw.attention.fa4_layout import row_slices
    from xstage.provenance import provenance
    from xstage.records import atomic_write_text

    torch.backends.cuda.matmul.allow_tf32 = False
    kernels = [x.strip() for x in args.kernels.split(",") if x.strip()]
    fas = [("fa4", fa4.load())] + [("pfa4" if kn == "drain" else f"pfa4_{kn}", fa4.load_persistent(kn)) for kn in kernels]
    split = {("pfa4" if kn == "drain" else f"pfa4_{kn}") for kn in kernels if P.resolve(kn)[1] == "local_last_split"}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows, ok, failed = [], True, set()
    for M in [int(x) for x in args.seq_lens.split(",")]:
        gen = torch.Generator(device="cuda").manual_seed(M)
        q, k, v = (torch.randn((1, M, args.heads, 128), device="cuda", generator=gen).to(torch.bfloat16)
                   for _ in range(3))
        outs, row = {}, {"M": M}
        for name, fa in fas:
            if name in failed:
                continue
            o = torch.full((1, M, args.heads, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
            t0 = time.monotonic()
            try:
                fa(q, k, v, o)
                torch.cuda.synchronize()
            except Exception as err:  # noqa: BLE001 - report the failure with its trace
                row[f"{name}_error"] = f"{type(err).__name__}: {err}"[:2000]
                row[f"{name}_trace"] = traceback.format_exc()[-6000:]
                ok = False
                failed.add(name)
                continue
            row[f"{name}_first_call_s"] = time.monotonic() - t0
            row[f"{name}_unwritten"] = int(torch.isnan(o).sum())
            outs[name] = o
        if "fa4" in outs:
            for r0, r1 in row_slices(M, 128):
                ref = fa4.reference_rows(q, k, v, r0, r1)
                for name, o in outs.items():
                    e = fa4.err_vs_ref(o[0, r0:r1], ref)
                    row.setdefault(f"{name}_ref", []).append(e)
                    if not e["ok"]:
                        failed.add(name)
            whole = torch.ones((1, M, args.heads, 1), dtype=torch.bool, device="cuda")
            for m, h, _ in P.split_tiles(M // 128, args.heads, 1, 0, 8, sms):
                whole[0, m * 128:(m + 1) * 128, h] = False
            row["split_tiles"] = int((~whole).sum()) // 128
            for name, o in outs.items():
                if name == "fa4":
                    continue
                if name in split:  # whole tiles: stock FA4's arithmetic; split tiles: another summation order
                    w = whole.expand_as(o)
                    row[f"{name}_whole_bitwise_equal"] = bool(torch.equal(outs["fa4"][w], o[w]))
                    if not row[f"{name}_whole_bitwise_equal"]:
                        failed.add(name)
                row[f"{name}_bitwise_equal"] = bool(torch.equal(outs["fa4"], o))
                row[f"{name}_max_abs_diff"] = float(torch.nan_to_num((outs["fa4"].float() - o.float()).abs(),
                                                                     nan=float("inf")).max())
                if row[f"{name}_unwritten"] or row[f"{name}_max_abs_diff"] > 1e-2:
                    failed.add(name)
            for name, fa in fas:
                if name not in outs:
                    continue
                o, ts = outs[name], []
                for _ in range(23):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    fa(q, k, v, o)
                    b.record()
                    b.synchronize()
                    ts.append(a.elapsed_time(b) * 1e3)
                row[f"{name}_us_median"] = sorted(ts[3:])[len(ts[3:]) // 2]
                if name != "fa4":  # after 23 launches: still every tile (the dynamic scheduler resets its counter)
                    first = o.clone() if name in split else outs["fa4"]  # the split kernel: its own first output
                    o.fill_(float("nan"))
                    fa(q, k, v, o)
                    torch.cuda.synchronize()
                    row[f"{name}_after_timing_equal"] = bool(torch.equal(first, o))
                    if not row[f"{name}_after_timing_equal"]:
                        failed.add(name)
                if name in split:  # fresh inputs after many launches: a stale partial or flag would show here
                    q2, k2, v2 = (torch.randn(q.shape, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(3))
                    o2 = torch.full_like(q2, float("nan"))
                    fa(q2, k2, v2, o2)
                    torch.cuda.synchronize()
                    errs = [fa4.err_vs_ref(o2[0, r0:r1], fa4.reference_rows(q2, k2, v2, r0, r1))
                            for r0, r1 in row_slices(M, 128)]
                    row[f"{name}_fresh_unwritten"] = int(torch.isnan(o2).sum())
                    row[f"{name}_fresh_ref"] = errs
                    if row[f"{name}_fresh_unwritten"] or not all(e["ok"] for e in errs):
                        failed.add(name)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.endswith("_trace")}, default=str), flush=True)
        for key in [k for k in row if k.endswith("_trace")]:
            print(row[key], file=sys.stderr)
    timeouts = P.split_timeouts()
    if timeouts:
        failed |= split
    ok = ok and not failed
    passed = [kn for kn, (name, _) in zip(kernels, fas[1:]) if name not in failed]
    doc = {"ok": ok, "kernels": kernels, "passed": passed, "rows": rows, "provenance": provenance(with_gpu=True),
           "scheduler": fa4.PERSISTENT_SCHEDULER, "split_timeouts": timeouts}
    atomic_write_text(args.out, json.dumps(doc, indent=1, default=str), overwrite=True)
    if args.passed:
        atomic_write_text(args.passed, ",".join(passed) + "\n", overwrite=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
