#!/usr/bin/env bash
# call24 (session 24), pre-registered in data/calibration-extra/call24-preregistration.md; run on an H100 only (kind
# nvidia-h100-x1; exit 3 on any other GPU, nothing run): three broad host grids and two local grids, each the
# product's own `xstage calibrate` (gated2, its default split), ~5 min. Writes $OUT/res.tgz after every step.
HERE=$(dirname "$0")
. "$HERE/common.sh"   # strict mode, no NVLink multicast, $OUT required, gpu_model
export PYTHONUNBUFFERED=1
gpu_model
[ "$GPU_MODEL" = H100 ] || { echo "call24: not an H100 ($GPU_NAME); nothing run"; exit 3; }
W=/tmp/call24-work
mkdir -p "$W"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.width.current,temperature.gpu,power.draw \
  --format=csv > "$W/gpu-start.txt" 2>&1
cat "$W/gpu-start.txt"
cal() {  # NAME TIMEOUT ARGS...
  local n=$1 to=$2 s=$SECONDS
  shift 2
  timeout "$to" python3 -m xstage.cli calibrate "$@" --model two-stage-gated2 --name "$n" --out "$W/$n" > "$W/$n.log" 2>&1
  echo "calibrate $n rc $? in $((SECONDS - s)) s"; tail -6 "$W/$n.log"
  tar czf "$OUT/res.tgz" -C "$W" .
}
cal h100-pcie-host-fresh2 120 --target host --grid fresh2
cal h100-pcie-host-fresh3 240 --target host --grid fresh3
cal h100-local-r3 150 --target local --grid wide
cal h100-pcie-host-fresh5 90 --target host --grid fresh5
cal h100-local-fresh2 90 --target local --grid fresh2
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv > "$W/gpu-end.txt" 2>&1
date -u
tar czf "$OUT/res.tgz" -C "$W" .
ls -la "$OUT"
