"""Compile the Gluon MoE kernel (``hw/moe/gluon.py``) for sm_90a without a GPU and print its resources.

Needs triton 3.6 (the GPU image's; Gluon's API moves between versions) with its bundled ptxas, and torch (CPU
tensors stand in for the operands). Prints one JSON line per option set: registers per thread at launch, spill
bytes, shared bytes per CTA, warps (the loader's warp rounds the CTA up to whole warpgroups), the setmaxnreg
values of the partitions; ``--ptx DIR`` keeps each PTX.

    python benchmarks/gpu/moe_gluon_compile.py '{}' '{"block_n": 256, "num_warps": 8, "maxnreg": 168, "stages": 4}'
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# compile-only extras (the launcher sets them from its arguments): block_n (the problem's), instrument, count_writes
EXTRA = {"block_n": 128, "instrument": 0, "count_writes": 0}


def compile_sm90(opts: dict, hidden: int = 1536, intermediate: int = 1536):
    """(CompiledKernel, ptxas report) of one option set (``gluon_args`` keys plus ``EXTRA``'s)."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    from xstage.hw.moe import gluon as G
    from xstage.hw.moe.gluon_args import gluon_options
    from xstage.hw.moe.gluon_launch import descriptors

    extra = {**EXTRA, **{k: v for k, v in opts.items() if k in EXTRA}}
    bm, bn = 128, extra["block_n"]
    o = gluon_options({k: v for k, v in opts.items() if k not in EXTRA}, hidden, intermediate, bm, bn)
    rows, experts = 64, 2
    x = torch.zeros(rows * bm, hidden, dtype=torch.bfloat16)
    act = torch.zeros(rows * bm, intermediate, dtype=torch.bfloat16)
    w1 = torch.zeros(experts, 2 * intermediate, hidden, dtype=torch.bfloat16)
    w2 = torch.zeros(experts, hidden, intermediate, dtype=torch.bfloat16)
    i32, f32, i64 = (torch.zeros(8, dtype=d) for d in (torch.int32, torch.float32, torch.int64))
    names = ["x_desc", "w1_desc", "act_desc", "w2_desc"]
    args = dict(zip(names, descriptors(x, w1, act, w2, bm, bn, o["block_k"])))
    args.update(act_ptr=act, tiles_ptr=i32, offsets_ptr=i32, l2_full_ptr=i32, error_ptr=i32, dest_rank_ptr=i32,
                dest_row_ptr=i32, weight_ptr=f32, dest_table_ptr=i64, count_ptr=i32, log_ptr=i64, place_ptr=i32,
                slots_ptr=i32)
    sig = {k: mangle_type(v) for k, v in args.items()}
    sig.update({k: "i32" for k in ("combine_rows", "hidden", "inter", "spin_limit", "n_sm")})
    const = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=o["block_k"], STAGES=o["stages"], LOADER_REGS=o["loader_regs"],
                 EARLY_ROWS=bool(o["early_rows"]), DIRECT=bool(o["direct_store"]), PLACE=2 if o["place"] else 0,
                 INSTRUMENT=bool(extra["instrument"]), COUNT_WRITES=bool(extra["count_writes"]),
                 num_warps=o["num_warps"])
    sig.update({k: "constexpr" for k in const})
    src = GluonASTSource(G._moe_ffn_gluon, sig, {(list(sig).index(k),): v for k, v in const.items()})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                            options=dict(num_warps=o["num_warps"], maxnreg=o["maxnreg"]))
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(kernel.asm["ptx"])
        rep = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", f"{tmp}/k.ptx", "-o", f"{tmp}/k.cubin"],
                             capture_output=True, text=True).stderr
    return kernel, rep


def main(argv) -> int:
    keep = None
    if argv[:1] == ["--ptx"]:
        keep, argv = Path(argv[1]), argv[2:]
    for n, text in enumerate(argv or ["{}"]):
        try:
            opts = json.loads(text)
            kernel, rep = compile_sm90(opts)
        except Exception as err:  # noqa: BLE001 - one line per option set that does not compile
            print(json.dumps({"options": text, "error": f"{type(err).__name__}: {str(err).splitlines()[-1][:200]}"}))
            continue
        ptx = kernel.asm["ptx"]
        regs = re.search(r"Used (\d+) registers", rep)
        spills = re.search(r"(\d+) bytes spill stores", rep)
        print(json.dumps({"options": opts, "registers": int(regs.group(1)) if regs else None,
                          "spill_store_bytes": int(spills.group(1)) if spills else None,
                          "shared_bytes": kernel.metadata.shared, "warps": kernel.metadata.num_warps,
                          "setmaxnreg": sorted(set(re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)))}))
        if keep:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"moe_gluon_{n}.ptx").write_text(ptx)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
