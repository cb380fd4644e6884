"""Pre-registered prediction: FA4 writing its output tiles straight into the Ulysses receive layout
(tile-end stores, no send shaping) on the h200-pcie-host platform, W = 8 emulated, 3 heads, d = 128.

FA-only times come from issue 16's probe figures (557 / 690 / 696 / 678 TFLOP/s at M = 8K / 16K / 32K
/ 64K), measured before this prediction and independently of it; the fused times are not used.
Two layouts: the exact Ulysses layout (this rank's own chunk stays in HBM: 7/8 of the tiles remote) and
every tile host-mapped (one strided tensor without VMM). Prints a table and writes the record:

    python benchmarks/predict_fa4.py [--out data/predictions/fa4-direct-h200-pcie-host.json] [--overwrite]
"""

import argparse
import json

from xstage.errors import exit_with
from xstage.provenance import provenance
from xstage.records import atomic_write_text
from xstage.sim.platform import load_platform
from xstage.sim.predict import FaKernel, predict_fa

FA4_TFLOPS = {8192: 557.0, 16384: 690.0, 32768: 696.0, 65536: 678.0}   # issue 16, H200, 2026-12-01
LAYOUTS = {"ulysses": None, "all_host": 1.0}


def predictions(platform_name: str = "h200-pcie-host") -> list:
    platform = load_platform(platform_name)
    rows = []
    for M, tflops in FA4_TFLOPS.items():
        fa_us = 4.0 * M * M * 3 * 128 / (tflops * 1e12) * 1e6
        for layout, fraction in LAYOUTS.items():
            r = predict_fa(FaKernel(seq_len=M, heads=3, head_dim=128, world_size=8, fa_us=fa_us,
                                    remote_fraction=fraction, send="tile_end"), platform)
            rows.append({"layout": layout, "fa_tflops_input": tflops, **r})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the prediction record (.json)")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    rows = predictions()
    print(f"{'M':>6} {'layout':>9} {'fa_us':>9} {'fused_us':>9} {'E_res_us':>9} {'hiding':>7}")
    for r in rows:
        print(f"{r['M']:>6} {r['layout']:>9} {r['fa_us']:>9.1f} {r['fused_us']:>9.1f} {r['E_res_us']:>9.1f} "
              f"{r['hiding_ratio']:>7.3f}")
    if args.out:
        record = {"what": "prediction, made before the fused FA4 variants were measured",
                  "kernel": "flash-attn-4 SM90 forward, 128x128 tiles, tile-end TMA stores, no send shaping",
                  "rows": rows, "provenance": provenance()}
        atomic_write_text(args.out, json.dumps(record, indent=1, default=str), overwrite=args.overwrite)
    return 0


if __name__ == "__main__":
    exit_with(main, "predict_fa4")
