#!/usr/bin/env bash
# call26 (session 26), pre-registered in data/calibration-extra/call26-preregistration.md. On an H200: call24's H200
# branch (bash benchmarks/gpu/call24.sh, pre-registered in session 24). On an H100: four host grids no H100 has
# measured (fresh10, fresh14: knee pairs; fresh4, fresh7: free-running bursts), each the product's own
# `xstage calibrate --model two-stage-gated2` with its default split, ~3 min; knee-band26 (the record `xstage model`
# reads) and pool24's free-running law are scored on them. Any other GPU: exit 3, nothing run. Writes $OUT/res.tgz
# after every step.
HERE=$(dirname "$0")
. "$HERE/common.sh"   # strict mode, no NVLink multicast, $OUT required, h100_branch, calib_*
export PYTHONUNBUFFERED=1
h100_branch call26   # an H200 runs call24's H200 branch; any other GPU but an H100: exit 3
calib_start /tmp/call26-work
cal() { calib_step "$1" "$2" 4 "${@:3}" --model two-stage-gated2; }   # NAME TIMEOUT ARGS...
# GRIDS: the grids to measure (default all four). The first call (session 26) wrote fresh10 and fresh14 and lost
# fresh4 / fresh7 to a fit that failed (data/calibration-extra/h100-call26/README.md): `bash call26.sh fresh4 fresh7`
# measures those two again.
GRIDS=("$@")
[ "$#" -eq 0 ] && GRIDS=(fresh10 fresh14 fresh4 fresh7)
for g in "${GRIDS[@]}"; do
  case "$g" in
    fresh10|fresh14|fresh4) cal "h100-pcie-host-$g" 120 --target host --grid "$g" ;;
    fresh7) cal "h100-pcie-host-$g" 150 --target host --grid "$g" ;;
    *) echo "call26: grid $g is not one of the call's (fresh10 fresh14 fresh4 fresh7); skipped" ;;
  esac
done
calib_end
