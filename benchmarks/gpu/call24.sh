#!/usr/bin/env bash
# call24 (session 24), pre-registered in data/calibration-extra/call24-preregistration.md: three broad host grids and
# two local grids, each the product's own `xstage calibrate` (gated2, its default split), ~5 min; folder names by the
# GPU that came (an H200's end in -c24; any other GPU: exit 3, nothing run). Writes $OUT/res.tgz after every step.
HERE=$(dirname "$0")
. "$HERE/common.sh"   # strict mode, no NVLink multicast, $OUT required, gpu_model, calib_*
export PYTHONUNBUFFERED=1
gpu_model
case "$GPU_MODEL" in
  H100) HOST=(h100-pcie-host-fresh2 h100-pcie-host-fresh3 h100-pcie-host-fresh5); LOC=(h100-local-r3 h100-local-fresh2) ;;
  H200) HOST=(h200-pcie-host-fresh2-c24 h200-pcie-host-fresh3-c24 h200-pcie-host-fresh5-c24)
        LOC=(h200-local-wide-c24 h200-local-fresh2-c24) ;;
  *) echo "call24: neither an H100 nor an H200 ($GPU_NAME); nothing run"; exit 3 ;;
esac
calib_start /tmp/call24-work
cal() { calib_step "$1" "$2" 6 "${@:3}" --model two-stage-gated2; }   # NAME TIMEOUT ARGS...
cal "${HOST[0]}" 120 --target host --grid fresh2
cal "${HOST[1]}" 240 --target host --grid fresh3
cal "${LOC[0]}" 150 --target local --grid wide
cal "${HOST[2]}" 90 --target host --grid fresh5
cal "${LOC[1]}" 90 --target local --grid fresh2
calib_end
