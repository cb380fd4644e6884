#!/usr/bin/env bash
# call24 (session 24), pre-registered in data/calibration-extra/call24-preregistration.md: three broad host grids and
# two local grids, each the product's own `xstage calibrate` (gated2, its default split), ~5 min; folder names by the
# GPU that came (an H200's end in -c24; any other GPU: exit 3, nothing run). Writes $OUT/res.tgz after every step.
HERE=$(dirname "$0")
. "$HERE/common.sh"   # strict mode, no NVLink multicast, $OUT required, gpu_model
export PYTHONUNBUFFERED=1
gpu_model
case "$GPU_MODEL" in
  H100) HOST=(h100-pcie-host-fresh2 h100-pcie-host-fresh3 h100-pcie-host-fresh5); LOC=(h100-local-r3 h100-local-fresh2) ;;
  H200) HOST=(h200-pcie-host-fresh2-c24 h200-pcie-host-fresh3-c24 h200-pcie-host-fresh5-c24)
        LOC=(h200-local-wide-c24 h200-local-fresh2-c24) ;;
  *) echo "call24: neither an H100 nor an H200 ($GPU_NAME); nothing run"; exit 3 ;;
esac
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
cal "${HOST[0]}" 120 --target host --grid fresh2
cal "${HOST[1]}" 240 --target host --grid fresh3
cal "${LOC[0]}" 150 --target local --grid wide
cal "${HOST[2]}" 90 --target host --grid fresh5
cal "${LOC[1]}" 90 --target local --grid fresh2
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv > "$W/gpu-end.txt" 2>&1
date -u
tar czf "$OUT/res.tgz" -C "$W" .
ls -la "$OUT"
