#!/usr/bin/env bash
# fresh14 (session 17): one device call, pre-registered in data/calibration-extra/fresh14-preregistration.md: the
# product's own command on a host grid nobody has measured, the grid measured twice in one command and fitted on the
# point-wise median (`xstage calibrate --repeat 2`):
#   xstage calibrate --target host --grid fresh14 --repeat 2 --model two-stage-lockq --split-rule bracket --no-copy
# (~80 s: two sweeps of ~38 s and the fit). Run from the staged copy's root with $OUT set; writes $OUT/res.tgz (the
# output folder, the command's log, nvidia-smi before and after). Scored on CPU by
# python benchmarks/calib_fresh14.py score --json data/calibration-extra/fresh14-scores.json
# GRID (default fresh14) and RUN (a name suffix, default none) run the same command on another grid
# (fresh13-repeat, session 17: GRID=fresh13 RUN=-r3; data/calibration-extra/fresh13-repeat-preregistration.md).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
: "${OUT:?set OUT to the output folder}"
W=/tmp/fresh14-work      # outside $OUT: only res.tgz comes back
mkdir -p "$W"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv > "$W/gpu-start.txt" 2>&1
cat "$W/gpu-start.txt"; date -u
GRID=${GRID:-fresh14}
n=h200-pcie-host-$GRID${RUN:-}
s=$SECONDS
timeout ${CMD_TIMEOUT_S:-170} python3 -m xstage.cli calibrate --target host --grid $GRID --repeat 2 \
  --model two-stage-lockq --split-rule bracket --no-copy --name $n --out "$W/$n" > "$W/calibrate-host.log" 2>&1
echo "calibrate host $GRID --repeat 2 rc $? in $((SECONDS - s)) s"; tail -30 "$W/calibrate-host.log"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv > "$W/gpu-end.txt" 2>&1
date -u
tar czf "$OUT/res.tgz" -C "$W" .
ls -la "$OUT"
