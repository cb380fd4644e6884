#!/usr/bin/env bash
# call27 (session 27), pre-registered in data/calibration-extra/call27-preregistration.md. On an H200: call24's H200
# branch (bash benchmarks/gpu/call24.sh, pre-registered in session 24). On an H100: call25's three knee-dense host
# grids (fresh11, fresh12, fresh13) once more, into *-call27 folders, each the product's own `xstage calibrate --model
# two-stage-gated2` with its default split, ~2.5 min; pool24 with the run's own drain rate (`--own-rate`) is scored on
# them. Any other GPU: exit 3, nothing run. Writes $OUT/res.tgz after every step.
HERE=$(dirname "$0")
. "$HERE/common.sh"   # strict mode, no NVLink multicast, $OUT required, h100_branch, calib_*
export PYTHONUNBUFFERED=1
h100_branch call27   # an H200 runs call24's H200 branch; any other GPU but an H100: exit 3
calib_start /tmp/call27-work
cal() { calib_step "$1" "$2" 4 "${@:3}" --model two-stage-gated2; }   # NAME TIMEOUT ARGS...
for g in fresh11 fresh12 fresh13; do
  cal "h100-pcie-host-$g-call27" 150 --target host --grid "$g"
done
calib_end
