#!/usr/bin/env bash
# Sourced by the device scripts that need the FA4 stack (flash-attn-4 + CuTe DSL, quack, nvshmem4py): joins the wheel
# parts staged under /tmp/wheels by the earlier calls of the same warm lease (data/gpu-tests/README.md), installs them
# into /tmp/site, puts /tmp/site on PYTHONPATH and writes the versions to $1/packages.txt (install log: $1/install.log).
# Returns 1 (after printing the log's tail) if the install or the imports fail. A second call on a machine that has
# /tmp/site already skips the install.
fa4_stack() {
  local d=$1
  mkdir -p "$d"
  if [ ! -d /tmp/site/flash_attn ]; then
    ( cd /tmp/wheels && for p in *.part00; do [ -e "$p" ] || continue; w=${p%.part00}; cat "$w".part* > "$w" && rm "$w".part*; done )
    timeout 120 python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/wheels/*.whl \
      > "$d/install.log" 2>&1 || { echo "install FAILED" >&2; tail -n 8 "$d/install.log" >&2; return 1; }
  fi
  export PYTHONPATH=/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site
  timeout 120 python3 -c 'import importlib.metadata as m, cutlass, flash_attn.cute, quack, nvshmem.core, torch, triton
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)
for n in ("flash-attn-4", "nvidia-cutlass-dsl", "quack-kernels", "nvshmem4py-cu13", "numba-cuda", "cuda-bindings"):
    print(n, m.version(n))' > "$d/packages.txt" 2>&1 || { echo "import FAILED" >&2; tail -n 8 "$d/packages.txt" >&2; return 1; }
  cat "$d/packages.txt" >&2
}
