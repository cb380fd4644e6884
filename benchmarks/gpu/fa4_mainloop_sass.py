"""Size of the consumer's K/V mainloop in SASS, stock FA4 vs the PersistentSm90 kernels (no GPU needed).

    python3.12 benchmarks/gpu/fa4_mainloop_sass.py --out mainloop-sass.json [--plans stock,drain1,drain,draindyn]

Traces and compiles each kernel with CuTe DSL fake tensors on a CPU machine (d = 128, bf16, non-causal, FA4's
SM90 config: 128x128 tiles, 2 stages, intra-WG overlap), keeps the PTX, assembles it with ``ptxas`` (``--ptxas``,
sm_90a; the PTX's .version is lowered to what that ptxas reads), disassembles it (``--cuobjdump``) and reports,
per kernel, the instruction count of every backward-branch loop that holds HGMMAs (the consumer's K/V loop is
the one with 16: 8 for S = QK^T, 8 for O += PV) and ptxas's register / spill line. Needs the CuTe DSL stack
(flash-attn-4, quack, cutlass-dsl) importable; torch and triton are stubbed (nothing here runs them).
"""

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLANS = {"stock": ("stock", "single"), "drain1": ("drain", "single"), "drain": ("drain", "static"),
         "draindyn": ("drain", "dynamic"), "stagger": ("stagger", "static"), "staggerll": ("stagger", "local_last"),
         "staggerdyn": ("stagger", "dynamic"), "staggersplit": ("staggersplit", "local_last_split"),
         "staggersplit1": ("staggersplit1", "local_last_split"), "staggersplitw": ("staggersplitw", "local_last_split"),
         "staggerll1": ("stagger1", "local_last")}


def stub_modules():
    """torch / triton stand-ins (FA4's and quack's package imports need them; no call reaches them)."""
    class Any(type):
        def __getattr__(cls, name):
            return Any(name, (), {})

        def __call__(cls, *a, **k):
            return a[0] if a and callable(a[0]) and not k else Any("r", (), {})

        def __getitem__(cls, k):
            return cls

        def __or__(cls, o):
            return cls
        __ror__ = __or__
    for name in ("torch", "torch.cuda", "torch.library", "torch.autograd", "torch.nn", "torch.nn.functional",
                 "torch.utils", "torch.utils._pytree", "torch._library", "torch.distributed", "torch._subclasses",
                 "torch._subclasses.fake_tensor", "triton",
                 "triton.language"):
        m = types.ModuleType(name)
        m.__path__ = []
        m.__getattr__ = lambda n: Any(n, (), {})
        sys.modules[name] = m
    for pkg, sub in (("flash_attn", "cute"), ("quack", None)):  # their __init__ imports torch-only modules
        root = Path(importlib.util.find_spec(pkg).submodule_search_locations[0])
        name = f"{pkg}.{sub}" if sub else pkg
        if sub:
            __import__(pkg)
        m = types.ModuleType(name)
        m.__path__ = [str(root / sub) if sub else str(root)]
        sys.modules[name] = m
    for name in ("xstage", "xstage.hw", "xstage.hw.attention"):  # our kernel modules, straight from the tree
        m = types.ModuleType(name)
        m.__path__ = [str(REPO / "hw" / "attention")] if name.endswith("attention") else []
        sys.modules[name] = m


def compile_ptx(plan: str, dump: Path) -> Path:
    import cutlass.cute as cute
    import cutlass.utils.hardware_info as hi
    import flash_attn.cute.flash_fwd_sm90 as m90
    from cutlass import BFloat16, Float32
    from flash_attn.cute.tile_scheduler import StaticPersistentTileScheduler
    from flash_attn.cute.utils import AuxData
    from quack.compile_utils import make_fake_tensor

    import xstage.hw.attention.fa4_persistent_kernel as pk
    import xstage.hw.attention.fa4_schedulers as sch

    class Hw:
        def __init__(self, *a, **k):
            pass

        def get_device_multiprocessor_count(self):
            return 132
    hi.HardwareInfo = Hw
    import cutlass.utils
    cutlass.utils.HardwareInfo = Hw
    kern, sched = PLANS[plan]
    single = getattr(compile_ptx, "single", None) or m90.SingleTileScheduler
    compile_ptx.single = single
    m90.SingleTileScheduler = {"single": single, "static": StaticPersistentTileScheduler,
                               "local_last": sch.local_last_scheduler(0, 8),
                               "dynamic": sch.dynamic_scheduler(0x7F0000001000),
                               "local_last_split": sch.split_scheduler(0x7F0000100000, 0, 8)}[sched]
    if kern.startswith("staggersplit"):
        import xstage.hw.attention.fa4_split_kernel as sk
        cls = sk.KERNELS[kern]
    else:
        cls = m90.FlashAttentionForwardSm90 if kern == "stock" else pk.KERNELS[kern]
    fa = cls(BFloat16, 128, 128, 1, is_causal=False, is_local=False, pack_gqa=False, tile_m=128, tile_n=128,
             num_stages=2, num_threads=384, Q_in_regs=False, intra_wg_overlap=True, mma_pv_is_rs=True,
             mask_mod=None, score_mod=None, has_aux_tensors=False, q_subtile_factor=1, paged_kv_non_tma=False)
    b, s, h = cute.sym_int(), cute.sym_int(), cute.sym_int()
    q, k, v, o = (make_fake_tensor(BFloat16, (b, s, h, 128), divisibility=8) for _ in range(4))
    cute.compile(fa, q, k, v, o, None, Float32(0.088), None, None, None, None, None, None, None, None, None,
                 AuxData(), None, None, cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True),
                 options="--enable-tvm-ffi")
    return max(Path(os.environ["CUTE_DSL_DUMP_DIR"]).glob("*.ptx"), key=lambda p: p.stat().st_mtime)


def hgmma_loops(sass: str) -> list:
    """(instructions, HGMMAs) of every backward-branch loop holding an HGMMA, smallest first."""
    ins = [(int(a, 16), t) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    at = {a: i for i, (a, _) in enumerate(ins)}
    loops = set()
    for i, (a, t) in enumerate(ins):
        m = re.search(r"BRA.*?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            body = ins[at[int(m.group(1), 16)]:i + 1]
            hg = sum("HGMMA" in x for _, x in body)
            if hg:
                loops.add((len(body), hg))
    return sorted(loops)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--plans", default="stock,drain1,drain,draindyn,stagger,staggerll,staggerdyn")
    p.add_argument("--ptxas", default="/usr/local/cuda-13.0/bin/ptxas")
    p.add_argument("--cuobjdump", default="cuobjdump")
    args = p.parse_args(argv)
    plans = [x for x in args.plans.split(",") if x]
    bad = [x for x in plans if x not in PLANS]
    if bad:
        print(f"--plans: {','.join(bad)} not in {','.join(PLANS)}", file=sys.stderr)
        return 2
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CUTE_DSL_KEEP_PTX"], os.environ["CUTE_DSL_DUMP_DIR"] = "1", tmp  # read when the DSL loads
        stub_modules()
        for plan in plans:
            dump = Path(tmp) / plan
            dump.mkdir()
            ptx = compile_ptx(plan, dump)
            text = re.sub(r"^\.version \d+\.\d+", ".version 9.0", ptx.read_text(), flags=re.M)
            (dump / "k.ptx").write_text(text)
            res = subprocess.run([args.ptxas, "-arch=sm_90a", "-v", str(dump / "k.ptx"), "-o", str(dump / "k.cubin")],
                                 capture_output=True, text=True, check=True)
            sass = subprocess.run([args.cuobjdump, "-sass", str(dump / "k.cubin")], capture_output=True, text=True,
                                  check=True).stdout
            loops = hgmma_loops(sass)
            rows[plan] = {"instructions": len(re.findall(r"/\*[0-9a-f]{4,}\*/\s+[^;]*;", sass)),
                          "kv_loop_instructions": next((n for n, h in loops if h == 16), None),
                          "hgmma_loops": loops, "ptxas": [x.strip() for x in res.stderr.splitlines() if "Used" in x
                                                          or "spill" in x]}
            print(plan, rows[plan]["instructions"], rows[plan]["kv_loop_instructions"], flush=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    ptxas = subprocess.run([args.ptxas, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    doc = {"what": "SASS size of the consumer's K/V mainloop (loop with 16 HGMMAs)", "rows": rows,
           "provenance": {"git_commit": commit, "ptxas": ptxas, "python": sys.version.split()[0],
                          "note": "compiled on a CPU machine with fake tensors (no GPU)"}}
    out = Path(args.out)
    tmp_out = out.with_suffix(out.suffix + ".tmp")
    tmp_out.write_text(json.dumps(doc, indent=1))
    tmp_out.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
