#!/usr/bin/env bash
# call25 (session 25), pre-registered in data/calibration-extra/call25-preregistration.md. On an H200: call24's H200
# branch (bash benchmarks/gpu/call24.sh, pre-registered in session 24). On an H100: three knee-dense host grids no
# H100 has measured (fresh11, fresh12, fresh13), each the product's own `xstage calibrate --model two-stage-gated2`
# with its default split, ~4 min; the knee-band record (knee-band25.json) is scored on them. Any other GPU: exit 3,
# nothing run. Writes $OUT/res.tgz after every step.
HERE=$(dirname "$0")
. "$HERE/common.sh"   # strict mode, no NVLink multicast, $OUT required, h100_branch, calib_*
export PYTHONUNBUFFERED=1
h100_branch call25   # an H200 runs call24's H200 branch; any other GPU but an H100: exit 3
calib_start /tmp/call25-work
cal() { calib_step "$1" "$2" 4 "${@:3}" --model two-stage-gated2; }   # NAME TIMEOUT ARGS...
cal h100-pcie-host-fresh11 150 --target host --grid fresh11
cal h100-pcie-host-fresh12 150 --target host --grid fresh12
cal h100-pcie-host-fresh13 150 --target host --grid fresh13
calib_end
