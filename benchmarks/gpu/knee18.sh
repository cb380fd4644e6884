#!/usr/bin/env bash
# knee18 (session 14): one device call, pre-registered in data/calibration-extra/knee18-preregistration.md:
# the committed host grids fresh11 and fresh12 measured again, each twice in separate processes (r2, r3), with the
# same command as fresh11.sh / fresh12.sh (knee10.sh): `xstage calibrate --target host --grid G --model v1 --no-copy`.
# Order f11 r2, f12 r2, f11 r3, f12 r3, so that a short call still has one repeat of each grid; a sweep starts only
# while BUDGET_S (default 220 s) leaves room for it (~45 s each). Local is not measured (the device share is four
# host sweeps). GRIDS / REPEATS narrow the call (knee18's call, after two failed starts had spent 180 of its 300 s:
# GRIDS=fresh12 REPEATS=r2, one sweep). SWEEPS="grid:run ..." names the sweeps and their order instead (knee21:
# benchmarks/gpu/knee21.sh). Run from the staged copy's root with $OUT set; writes $OUT/res.tgz.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
: "${OUT:?set OUT to the output folder}"
BUDGET_S=${BUDGET_S:-220}
W=/tmp/knee18-work      # outside $OUT: only res.tgz comes back
mkdir -p "$W"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv > "$W/gpu-start.txt" 2>&1
cat "$W/gpu-start.txt"; date -u
t0=$SECONDS
if [ -z "${SWEEPS:-}" ]; then
  for run in ${REPEATS:-r2 r3}; do for grid in ${GRIDS:-fresh11 fresh12}; do SWEEPS="${SWEEPS:-} $grid:$run"; done; done
fi
for sweep in $SWEEPS; do
  grid=${sweep%%:*} run=${sweep#*:}
  if (( SECONDS - t0 + 50 > BUDGET_S )); then echo "skip $grid $run at $((SECONDS - t0)) s"; continue; fi
  n=h200-pcie-host-$grid-$run
  s=$SECONDS
  timeout 75 python3 -m xstage.cli calibrate --target host --grid $grid --model v1 --no-copy --name $n \
    --out "$W/$n" > "$W/calibrate-$grid-$run.log" 2>&1
  echo "calibrate host $grid $run rc $? in $((SECONDS - s)) s"; tail -2 "$W/calibrate-$grid-$run.log"
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv > "$W/gpu-end.txt" 2>&1
echo "elapsed $((SECONDS - t0)) s"; date -u
tar czf "$OUT/res.tgz" -C "$W" .
ls -la "$OUT"
