#!/usr/bin/env bash
# call23 (session 23): the device call pre-registered in data/attention-extra/call23-preregistration.md, two branches
# by the GPU that comes. Run after the device prelude, with the FA4 stack's wheels staged under /tmp/wheels by a first
# call of the same warm lease (data/gpu-tests/README.md: carry [".carry-1"], then this call with [".carry-2", ".whl"]).
#   H200: the pending fresh16 repeat (data/calibration-extra/fresh16-repeat-preregistration.md: GRID=fresh16 RUN=-r2
#         benchmarks/gpu/fresh14.sh, ~75 s), then benchmarks/gpu/gpu_tests_all.sh (GPU-marked tests, smoke, FA4 sweep)
#   H100: benchmarks/gpu/gpu_tests_all.sh: every GPU-marked test on an H100 for the first time, then the PersistentSm90
#         smoke and the default FA4 sweep, on which the seventh FA rule is scored (~3-4 min)
# A third call on the same warm machine may run the FA4 tile log on an H100 (the pre-registration's second question):
#   PYTHONPATH=/tmp/site/nvidia_cutlass_dsl/dsl_packages:/tmp/site python3 benchmarks/gpu/fa4_tile_log.py --out DIR
# Writes $OUT/res.tgz (H200: the calibration), $OUT/gpu-tests/, $OUT/attention-fa4/.
# (ran with this header written out; it was folded into common.sh's gpu_model afterwards, behaviour unchanged)
HERE=$(dirname "$0")
. "$HERE/common.sh"   # strict mode, no NVLink multicast, $OUT required, gpu_model
export PYTHONUNBUFFERED=1
gpu_model
T0=$SECONDS
case "$GPU_MODEL" in
  H200) GRID=fresh16 RUN=-r2 bash "$HERE/fresh14.sh" ;;
  H100) ;;
  *) echo "call23: neither an H200 nor an H100 ($GPU_NAME); nothing run"; exit 3 ;;
esac
BUDGET_S=$(( ${CALL_S:-560} - (SECONDS - T0) )) bash "$HERE/gpu_tests_all.sh"
echo "call23 done in $((SECONDS - T0)) s"; date -u
