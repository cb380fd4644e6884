"""The tile log leaves the default kernels' code alone: PTX of each PersistentSm90 plan with the log off and on.

    python3.12 benchmarks/gpu/fa4_tile_log_ptx.py --out ptx.json [--repo PATH] [--plans drain,stagger,...]

Compiles each plan on a CPU machine exactly as ``fa4_mainloop_sass.py`` does (fake tensors, torch stubbed; that
script's ``stub_modules`` / ``compile_ptx``, loaded from ``--repo``, so the kernels are that checkout's), once as is
and, where the checkout has ``fa4_tile_log_kernel``, once more with every kernel class wrapped by ``logged_class``;
assembles each PTX with ``ptxas`` (sm_90a) and records its sha256 (kernel-name mangling stripped), its length, how
many ``%globaltimer`` reads it holds and ptxas's register / spill lines. Run it for two checkouts and compare the
"off" hashes: equal hashes are byte-equal default kernels.
"""

import argparse
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

LOG_ADDR, LOG_SLOTS = 0x7F0000200000, 16  # any 8-B aligned address: it is compiled in, nothing runs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--repo", default=str(Path(__file__).resolve().parents[2]))
    p.add_argument("--plans", default="drain,stagger,staggerll,staggersplitw")
    p.add_argument("--ptxas", default="/usr/local/cuda-13.0/bin/ptxas")
    args = p.parse_args(argv)
    repo = Path(args.repo)
    sass = repo / "benchmarks" / "gpu" / "fa4_mainloop_sass.py"
    if not sass.exists():
        print(f"--repo: {repo} has no benchmarks/gpu/fa4_mainloop_sass.py", file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location("fa4_mainloop_sass", sass)
    S = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(S)
    plans = [x for x in args.plans.split(",") if x]
    bad = [x for x in plans if x not in S.PLANS or x == "stock"]
    if bad:
        print(f"--plans: {','.join(bad)} not among that checkout's persistent plans", file=sys.stderr)
        return 2
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CUTE_DSL_KEEP_PTX"], os.environ["CUTE_DSL_DUMP_DIR"] = "1", tmp
        S.stub_modules()
        import xstage.hw.attention.fa4_persistent_kernel as pk
        import xstage.hw.attention.fa4_split_kernel as sk
        tables = (pk.KERNELS, sk.KERNELS)
        default = [dict(t) for t in tables]
        logged = (repo / "hw" / "attention" / "fa4_tile_log_kernel.py").exists()
        for mode in ("off", "log") if logged else ("off",):
            for t, d in zip(tables, default):
                t.update(d)
            if mode == "log":
                from xstage.hw.attention.fa4_tile_log_kernel import logged_class

                for t in tables:
                    t.update({k: logged_class(c, LOG_ADDR, LOG_SLOTS) for k, c in t.items()})
            for plan in plans:
                dump = Path(tmp) / f"{plan}-{mode}"
                dump.mkdir()
                text = re.sub(r"^\.version \d+\.\d+", ".version 9.0", S.compile_ptx(plan, dump).read_text(), flags=re.M)
                (dump / "k.ptx").write_text(text)
                res = subprocess.run([args.ptxas, "-arch=sm_90a", "-v", str(dump / "k.ptx"), "-o",
                                      str(dump / "k.cubin")], capture_output=True, text=True, check=True)
                body = re.sub(r"_Z\w+|\w+_0x[0-9a-f]+", "", text)  # names carry object addresses
                rows[f"{plan}/{mode}"] = {"sha256": hashlib.sha256(body.encode()).hexdigest(),
                                          "ptx_lines": len(text.splitlines()), "globaltimer": text.count("%globaltimer"),
                                          "ptxas": [x.strip() for x in res.stderr.splitlines() if "Used" in x or "spill" in x]}
                print(plan, mode, rows[f"{plan}/{mode}"]["sha256"][:12], rows[f"{plan}/{mode}"]["globaltimer"], flush=True)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    doc = {"what": "PTX of the PersistentSm90 plans with the tile log off / on (CPU compile, fake tensors)",
           "repo": str(repo), "rows": rows,
           "provenance": {"git_commit": commit, "python": sys.version.split()[0],
                          "ptxas": subprocess.run([args.ptxas, "--version"], capture_output=True,
                                                  text=True).stdout.strip().splitlines()[-1]}}
    out = Path(args.out)
    tmp_out = out.with_suffix(out.suffix + ".tmp")
    tmp_out.write_text(json.dumps(doc, indent=1))
    tmp_out.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
