#!/usr/bin/env bash
# free-local (session 9, cal9): one device call, the pre-registered fresh7 grid (data/calibration-extra/
# fresh7-preregistration.md): xstage calibrate --grid fresh7 --model v1 --no-copy on local HBM, then on the host path.
# Run after the stage.sh prelude (cwd: the staged copy); writes $OUT/res.tgz (both record folders and the logs).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p $OUT/work
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv > $OUT/work/gpu-start.txt 2>&1
cat $OUT/work/gpu-start.txt
for spec in local:local:45 host:pcie-host:90; do
  IFS=: read -r target name limit <<< "$spec"
  D=$OUT/work/h200-$name-fresh7
  timeout $limit xstage calibrate --target $target --grid fresh7 --model v1 --no-copy --name h200-$name-fresh7 \
    --out $D > $OUT/work/calibrate-$target.log 2>&1
  echo "$target rc $?"; tail -3 $OUT/work/calibrate-$target.log
  [ -d $D ] && mv $OUT/work/calibrate-$target.log $D/
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu --format=csv,noheader > $OUT/work/gpu-end.txt 2>&1
tar czf $OUT/res.tgz -C $OUT/work .
ls -la $OUT
