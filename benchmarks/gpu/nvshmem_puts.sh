#!/usr/bin/env bash
# The two issue paths of the peer calibration at world size 1 on one GPU (issue 18, self-PE): install the
# carried nvshmem4py wheel (and numba-cuda when the image's is older than nvshmem4py's bindings need), then
# `xstage calibrate --target peer --self-peer --backend nvshmem --quick` with --issue put-nbi, put and store,
# the gpu-marked put test, and (PATHS=1) the W-rank attention / MoE smoke on both backends
# (benchmarks/gpu/nvshmem_paths.py). Run through run_all.sh (it installs .whl/ and the checkout) with $OUT set
# and .carry-nv/ carried; writes $OUT/nvshmem-puts/. BUDGET_S (default 140) bounds the whole script; every
# step has its own timeout. CALIB="put-nbi put store" picks the calibrations, PYTEST=0 / PATHS=0 skip steps.
# The device tool sends the session's checkout, not a helper's worktree: a helper copies its tree (git archive)
# and the wheels into an ignored .carry-* folder of that checkout and unpacks it there first (issue 18's runs).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export TQDM_MININTERVAL=${TQDM_MININTERVAL:-5} PYTHONUNBUFFERED=1
D="$OUT/nvshmem-puts"
mkdir -p "$D"
T0=$(date +%s)
BUDGET=${BUDGET_S:-140}
status=0
step() { echo "== [$(( $(date +%s) - T0 ))s] $*" >&2; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
unset WORLD_SIZE RANK LOCAL_RANK MASTER_ADDR      # self-PE: no torchrun
[ -z "${CUDA_HOME:-}" ] && [ -d /usr/local/cuda ] && export CUDA_HOME=/usr/local/cuda   # headers for the shims

gpu_state "$D/gpu-start.txt" >/dev/null
"$PY" -m pip show numba numba-cuda llvmlite cuda-core cuda-bindings cuda-pathfinder nvidia-nvshmem-cu13 cffi \
  2>/dev/null | grep -E '^(Name|Version)' > "$D/packages.txt"
step "install nvshmem4py (and numba-cuda if needed)"
wheels=(.carry-nv/nvshmem4py*.whl)
if ! "$PY" - <<'EOF'
import importlib.metadata as m, sys
v = tuple(int(x) for x in m.version("numba-cuda").split(".")[:2])
sys.exit(0 if v >= (0, 28) else 1)
EOF
then wheels+=(.carry-nv/extra/numba_cuda*.whl); echo "numba-cuda from the carry" >> "$D/packages.txt"; fi
timeout 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "${wheels[@]}" \
  > "$D/install.log" 2>&1 || { echo "install FAILED" >&2; tail -n 5 "$D/install.log" >&2; exit 1; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
timeout 60 "$PY" -c 'import time; t = time.time(); from xstage.hw.microbench.put_kernel import numpy_compat
numpy_compat(); import numpy, numba, numba.cuda, nvshmem.core; import importlib.metadata as m
import nvshmem.bindings.device.numba as b
print("numpy", numpy.__version__, "numba", numba.__version__, "numba-cuda", m.version("numba-cuda"), "nvshmem4py",
      m.version("nvshmem4py-cu13"), "bindings", b.__file__, "import_s", round(time.time() - t, 1))' >> "$D/packages.txt" 2>&1 \
  || { echo "bindings import FAILED" >&2; tail -n 8 "$D/packages.txt" >&2; status=1; }
cat "$D/packages.txt" >&2

# 1) the quick peer calibration through each issue path (the put paths first)
for issue in ${CALIB:-put-nbi put store}; do
  t=$(left); [ "$t" -gt 75 ] && t=75
  if [ "$t" -lt 25 ]; then echo "calibrate --issue $issue skipped (no time left)" >&2; continue; fi
  step "xstage calibrate --target peer --self-peer --backend nvshmem --issue $issue --quick (timeout ${t}s)"
  timeout -k 5 "$t" "$PY" -m xstage.cli calibrate --target peer --self-peer --backend nvshmem --issue "$issue" \
    --quick --no-copy --out "$D/$issue" --overwrite --json > "$D/summary-$issue.json" 2> "$D/calibrate-$issue.log"
  rc=$?; tail -n 3 "$D/calibrate-$issue.log" >&2
  [ $rc -ne 0 ] && { echo "calibrate --issue $issue FAILED (rc=$rc)" >&2; tail -n 25 "$D/calibrate-$issue.log" >&2; status=1; }
done

# 2) the gpu-marked tests of the put path, 3) the W-rank paths on both backends
t=$(left)
if [ "${PYTEST:-1}" = 1 ] && [ "$t" -gt 30 ]; then
  step "pytest -m gpu tests/hw/test_nvshmem_puts.py (timeout ${t}s)"
  timeout -k 5 "$t" "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/hw/test_nvshmem_puts.py > "$D/gpu-test.log" 2>&1 \
    || { status=1; echo "gpu test FAILED" >&2; }
  tail -n 15 "$D/gpu-test.log" >&2
fi
t=$(left)
if [ "${PATHS:-0}" = 1 ] && [ "$t" -gt 30 ]; then
  step "W-rank attention / MoE smoke on both backends (timeout ${t}s)"
  timeout -k 5 "$t" "$PY" benchmarks/gpu/nvshmem_paths.py "$D/paths.json" > "$D/paths.log" 2>&1 || status=1
  tail -n 20 "$D/paths.log" >&2
fi

# the short table (one column per issue path that left a summary)
cols=(); for issue in ${CALIB:-put-nbi put store}; do cols+=("$issue=$D/summary-$issue.json"); done
summary_table --width 16 --label-width 24 "${cols[@]}" -- platform R_GBps T_iss0_us_at_32KiB Q_MiB t_fixed_us \
  producer_issue_GBps median_rel_err_T_iss n_points kernel_GBps_rate_max
gpu_state "$D/gpu-end.txt" >/dev/null
step "nvshmem_puts.sh done, status $status"
exit "$status"
