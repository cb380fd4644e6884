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
# Arguments (call27b, session 27): SUFFIX GRID... measures those grids into h100-pcie-host-GRID-SUFFIX folders
# (data/calibration-extra/call27b-preregistration.md); none: call27's three grids with the suffix call27. Session 28
# (call28c) adds call24's broad grids fresh2, fresh3 and fresh5 with call24's time limits.
SUFFIX=${1:-call27}
GRIDS=("${@:2}")
[ "$#" -le 1 ] && GRIDS=(fresh11 fresh12 fresh13)
calib_start "/tmp/$SUFFIX-work"
cal() { calib_step "$1" "$2" 4 "${@:3}" --model two-stage-gated2; }   # NAME TIMEOUT ARGS...
for g in "${GRIDS[@]}"; do
  case "$g" in
    fresh10|fresh11|fresh12|fresh13|fresh14) cal "h100-pcie-host-$g-$SUFFIX" 150 --target host --grid "$g" ;;
    fresh2|fresh5) cal "h100-pcie-host-$g-$SUFFIX" 120 --target host --grid "$g" ;;   # broad grids (call28c)
    fresh3) cal "h100-pcie-host-$g-$SUFFIX" 240 --target host --grid "$g" ;;
    *) echo "$SUFFIX: grid $g is neither a knee grid (fresh10-fresh14) nor fresh2, fresh3, fresh5; skipped" ;;
  esac
done
calib_end
