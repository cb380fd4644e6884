"""Smoke check of PersistentSm90 (hw/attention/fa4_persistent.py) on one GPU before the FA4 sweep uses it.

    python3 benchmarks/gpu/fa4_persistent_smoke.py --out $OUT/fa4-persistent-smoke.json   # under timeout

Per M: fresh random inputs; stock FA4 and PersistentSm90 into NaN-poisoned HBM outputs; every element
written, PersistentSm90 against stock FA4 (bitwise flag, max |diff|) and both against a float32 reference on
three row slices; then a short CUDA-event timing of both (median of 20, for orientation only: the sweep's
matched pairs are the measurement). Writes one JSON file (with provenance); exit status 1 if a check failed.
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
    args = p.parse_args(argv)
    import torch

    from xstage.hw.attention import fa4
    from xstage.hw.attention.fa4_layout import row_slices
    from xstage.provenance import provenance
    from xstage.records import atomic_write_text

    torch.backends.cuda.matmul.allow_tf32 = False
    stock, pers = fa4.load(), fa4.load_persistent()
    rows, ok = [], True
    for M in [int(x) for x in args.seq_lens.split(",")]:
        gen = torch.Generator(device="cuda").manual_seed(M)
        q, k, v = (torch.randn((1, M, args.heads, 128), device="cuda", generator=gen).to(torch.bfloat16)
                   for _ in range(3))
        outs, row = {}, {"M": M}
        for name, fa in (("fa4", stock), ("pfa4", pers)):
            o = torch.full((1, M, args.heads, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
            t0 = time.monotonic()
            try:
                fa(q, k, v, o)
                torch.cuda.synchronize()
            except Exception as err:  # noqa: BLE001 - report the failure with its trace
                row[f"{name}_error"] = f"{type(err).__name__}: {err}"[:2000]
                row[f"{name}_trace"] = traceback.format_exc()[-6000:]
                ok = False
                continue
            row[f"{name}_first_call_s"] = time.monotonic() - t0
            row[f"{name}_unwritten"] = int(torch.isnan(o).sum())
            outs[name] = o
        if len(outs) == 2:
            row["bitwise_equal"] = bool(torch.equal(outs["fa4"], outs["pfa4"]))
            row["max_abs_diff"] = float(torch.nan_to_num((outs["fa4"].float() - outs["pfa4"].float()).abs(),
                                                         nan=float("inf")).max())
            for r0, r1 in row_slices(M, 128):
                ref = fa4.reference_rows(q, k, v, r0, r1)
                for name, o in outs.items():
                    e = fa4.err_vs_ref(o[0, r0:r1], ref)
                    row.setdefault(f"{name}_ref", []).append(e)
                    ok = ok and e["ok"]
            ok = ok and row["pfa4_unwritten"] == 0 and row["max_abs_diff"] <= 1e-2
            for name, fa in (("fa4", stock), ("pfa4", pers)):
                o = outs[name]
                ts = []
                for _ in range(23):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    fa(q, k, v, o)
                    b.record()
                    b.synchronize()
                    ts.append(a.elapsed_time(b) * 1e3)
                row[f"{name}_us_median"] = sorted(ts[3:])[len(ts[3:]) // 2]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.endswith("_trace")}, default=str), flush=True)
        for key in [k for k in row if k.endswith("_trace")]:
            print(row[key], file=sys.stderr)
    doc = {"ok": ok, "rows": rows, "provenance": provenance(with_gpu=True), "scheduler": pers.scheduler}
    atomic_write_text(args.out, json.dumps(doc, indent=1, default=str), overwrite=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
