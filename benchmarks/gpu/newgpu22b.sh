#!/usr/bin/env bash
# newgpu22b (session 22): the second device call, two pre-registered branches by the GPU that comes.
#   H200: the pending fresh16 repeat (data/calibration-extra/fresh16-repeat-preregistration.md), i.e.
#         GRID=fresh16 RUN=-r2 bash benchmarks/gpu/fresh14.sh
#   H100: data/calibration-extra/h100-second-preregistration.md: fresh15 (--repeat 2, lockq), the broad fresh grid
#         (gated2) and the wide local grid again (~3 min).
# Run from the staged copy's root with $OUT set; writes $OUT/res.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
: "${OUT:?set OUT to the output folder}"
N=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $N"
case "$N" in
  *H200*) GRID=fresh16 RUN=-r2 exec bash "$(dirname "$0")/fresh14.sh" ;;
  *H100*) ;;
  *) echo "newgpu22: neither an H200 nor an H100 ($N); nothing run"; exit 3 ;;
esac
W=/tmp/newgpu22b-work
mkdir -p "$W"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,temperature.gpu,power.draw \
  --format=csv > "$W/gpu-start.txt" 2>&1
cat "$W/gpu-start.txt"; date -u
cal() {  # NAME TIMEOUT ARGS...
  local n=$1 to=$2 s=$SECONDS; shift 2
  timeout "$to" python3 -m xstage.cli calibrate "$@" --name "$n" --out "$W/$n" > "$W/$n.log" 2>&1
  echo "calibrate $n rc $? in $((SECONDS - s)) s"; tail -14 "$W/$n.log"
  tar czf "$OUT/res.tgz" -C "$W" .   # after every step: a call stopped at its limit still brings back what ran
}
cal h100-pcie-host-fresh15 190 --target host --grid fresh15 --repeat 2 --model two-stage-lockq --split-rule bracket --no-copy
cal h100-pcie-host-fresh 120 --target host --grid fresh --model two-stage-gated2
cal h100-local-r2 120 --target local --grid wide --model two-stage-gated2
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv > "$W/gpu-end.txt" 2>&1
date -u
tar czf "$OUT/res.tgz" -C "$W" .
ls -la "$OUT"
