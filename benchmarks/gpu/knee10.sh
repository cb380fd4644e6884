#!/usr/bin/env bash
# knee10 (session 10): one device call, pre-registered in data/calibration-extra/knee10-preregistration.md:
# xstage calibrate --grid fresh10 on host and local (v1 on the device keeps the call short; every model is refitted
# on the CPU). Run from the staged copy's root (.device/stage.sh's prelude) with $OUT set; writes $OUT/res.tgz.
# GRID=fresh11 / fresh12 measures that grid instead (sessions 13 / 14, benchmarks/gpu/fresh11.sh, fresh12.sh).
set -u
GRID=${GRID:-fresh10}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
: "${OUT:?set OUT to the output folder}"
W=$OUT/work
mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv > "$W/gpu-start.txt" 2>&1
cat "$W/gpu-start.txt"
for t in host local; do
  n=$([ $t = host ] && echo h200-pcie-host-$GRID || echo h200-local-$GRID)
  timeout 150 python3 -m xstage.cli calibrate --target $t --grid $GRID --model v1 --no-copy --name $n \
    --out "$W/$n" > "$W/calibrate-$t.log" 2>&1
  echo "calibrate $t rc $?"; tail -3 "$W/calibrate-$t.log"
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv > "$W/gpu-end.txt" 2>&1
tar czf "$OUT/res.tgz" -C "$W" .
ls -la "$OUT"
