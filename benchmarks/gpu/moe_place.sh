#!/usr/bin/env bash
# Issue 17, one device call: tune the bf16 configurations under 0.9x the faster library
# (benchmarks/moe_place_tune.py: short.json / long.json), then re-measure every bf16 configuration of the sweep
# with quack's grouped GEMM timed in the same run (bench --quack) at those options, then the GPU pytest if
# time is left. Everything lands in ONE tarball ($OUT/moe-place.tgz; the device returns few files) plus the
# logs. Needs the CuTe DSL stack on PYTHONPATH for quack (else torch only).
#   OUT=$OUT bash benchmarks/gpu/moe_place.sh
set -u
O=${OUT:?set OUT}
W=$(mktemp -d)
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$W/smi-start.txt" 2>&1
(cd benchmarks && timeout "${TUNE_TIMEOUT:-90}" python3 moe_place_tune.py --out "$W/place-tune" \
    --budget-s "${TUNE_BUDGET:-70}") > "$W/place-tune.log" 2>&1
tail -1 "$W/place-tune.log"
mkdir -p "$W/place-tune"
for f in short long; do [ -s "$W/place-tune/$f.json" ] || echo '{}' > "$W/place-tune/$f.json"; done
timeout "${RUN_TIMEOUT:-200}" python3 -m xstage.hw.moe.bench --out "$W/run" --precision bf16 --quack --no-tune \
    --short-k-kernel "$W/place-tune/short.json" --long-k-kernel "$W/place-tune/long.json" \
    --budget-s "${RUN_BUDGET:-160}" > "$W/run.log" 2>&1
echo "run rc=$?"; grep -E "checks:|failed checks" "$W/run.log" | tail -2
el=$(( $(date +%s) - T0 ))
if [ "$el" -lt "${TEST_IF_BELOW:-260}" ]; then
  timeout 45 python3 -m pytest -q -p no:cacheprovider -m gpu tests/hw/test_moe_kernel.py > "$W/gpu-test.log" 2>&1
  tail -1 "$W/gpu-test.log"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu --format=csv > "$W/smi-end.txt" 2>&1
echo "elapsed $(( $(date +%s) - T0 )) s"
[ -f "$W/run/moe-tile.parquet" ] && mv "$W/run/moe-tile.parquet" "$O/moe-tile.parquet"
tar czf "$O/moe-place.tgz" -C "$W" . && cp "$W/run.log" "$W/place-tune.log" "$O/" && ls -la "$O"
