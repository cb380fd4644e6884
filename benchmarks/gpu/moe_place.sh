#!/usr/bin/env bash
# Issue 17, one device call: tune the seven bf16 configurations under 0.9x the faster library at two programs
# per SM (benchmarks/moe_place_tune.py: placement, early destinations, prefetch; pick.json), then re-measure
# every bf16 configuration of the sweep with quack's grouped GEMM timed in the same run (bench --quack) at the
# pick, then the GPU pytest if time is left. Needs the CuTe DSL stack on PYTHONPATH for quack (else torch only).
#   OUT=$OUT bash benchmarks/gpu/moe_place.sh
set -u
O=${OUT:?set OUT}
mkdir -p "$O"
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$O/smi-start.txt" 2>&1
(cd benchmarks && timeout "${TUNE_TIMEOUT:-120}" python3 moe_place_tune.py --out "$O/place-tune" \
    --budget-s "${TUNE_BUDGET:-95}") > "$O/place-tune.log" 2>&1
tail -3 "$O/place-tune.log"
[ -s "$O/place-tune/pick.json" ] || { mkdir -p "$O/place-tune"; echo '{}' > "$O/place-tune/pick.json"; }
timeout "${RUN_TIMEOUT:-220}" python3 -m xstage.hw.moe.bench --out "$O/run" --precision bf16 --quack --no-tune \
    --short-k-kernel "$O/place-tune/pick.json" --budget-s "${RUN_BUDGET:-175}" > "$O/run.log" 2>&1
echo "run rc=$?"; grep -E "checks:|failed checks" "$O/run.log" | tail -2
el=$(( $(date +%s) - T0 ))
if [ "$el" -lt "${TEST_IF_BELOW:-330}" ]; then
  timeout 50 python3 -m pytest -q -p no:cacheprovider -m gpu tests/hw/test_moe_kernel.py > "$O/gpu-test.log" 2>&1
  tail -2 "$O/gpu-test.log"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu --format=csv > "$O/smi-end.txt" 2>&1
echo "elapsed $(( $(date +%s) - T0 )) s"
