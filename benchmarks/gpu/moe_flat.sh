#!/usr/bin/env bash
# Issue 17, the flattened short-K kernel (hw/moe/flat.py). Two device calls, each ONE tarball under $OUT:
#   OUT=$OUT bash benchmarks/gpu/moe_flat.sh tune    # benchmarks/moe_flat_tune.py on the seven short-K configurations
#                                                    # under 0.9x the faster library (torch, quack untuned + autotuned),
#                                                    # then the flat GPU pytest                      -> $OUT/moe-flat-tune.tgz
#   OUT=$OUT SHORT=short.json bash benchmarks/gpu/moe_flat.sh sweep [bench flags...]
#                                                    # the bench at those short-K options, quack in the same rotation,
#                                                    # bf16 and W8A8                                  -> $OUT/moe-flat-run.tgz
#   OUT=$OUT bash benchmarks/gpu/moe_flat.sh all [bench flags...]   # both in one call, the sweep at the tuner's pick
#                                                                     (quack autotuned: TUNED_BUDGET s at most)
#   OUT=$OUT bash benchmarks/gpu/moe_flat.sh dit      # hidden == intermediate only (DiT-MoE, where the flattened loop
#                                                    # is pipelined): tuner, then the bench on those models (bf16)
# Needs the CuTe DSL stack on PYTHONPATH for quack (. .carry-tools/stack.sh; else torch only).
set -u
O=${OUT:?set OUT}
MODE=${1:?tune or sweep}
shift
W=$(mktemp -d)
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$W/smi-start.txt" 2>&1
DIT=DiT-MoE-S,DiT-MoE-M
if [ "$MODE" = dit ]; then TUNE_ARGS="--models $DIT"; set -- --precision bf16 --models $DIT "$@"; else TUNE_ARGS="--quack-tuned"; fi
if [ "$MODE" = tune ] || [ "$MODE" = all ] || [ "$MODE" = dit ]; then
  (cd benchmarks && timeout "${TUNE_TIMEOUT:-200}" python3 moe_flat_tune.py --out "$W/flat-tune" \
      --budget-s "${TUNE_BUDGET:-90}" $TUNE_ARGS --tuned-budget-s "${TUNED_BUDGET:-60}") 2>&1 \
      | tee "$W/flat-tune.log" | grep -v "^ *File\|^    " | tail -60
  TGZ=moe-flat-tune.tgz
  SHORT="$W/flat-tune/short.json"
  [ -s "$SHORT" ] || echo '{}' > "$SHORT"
  echo "short-K pick: $(cat "$SHORT") [$(( $(date +%s) - T0 )) s]"
fi
if [ "$MODE" = tune ]; then
  timeout "${TEST_TIMEOUT:-60}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/hw/test_moe_flat.py \
      > "$W/gpu-test.log" 2>&1
  tail -1 "$W/gpu-test.log"
else
  QUACK=--quack; python3 -c "import quack" 2>/dev/null || QUACK=""
  timeout "${RUN_TIMEOUT:-400}" python3 -m xstage.hw.moe.bench --out "$W/run" $QUACK --no-tune \
      --short-k-kernel "${SHORT:?set SHORT to a short.json of the tuner}" --budget-s "${RUN_BUDGET:-300}" "$@" \
      > "$W/run.log" 2>&1
  echo "run rc=$?"; grep -E "checks:|failed checks" "$W/run.log" | tail -2
  rm -f "$W/run/moe-tile.parquet"   # the full tile log (> 16 MB) cannot come back; moe-tile-small.parquet does
  TGZ=moe-flat-run.tgz
  el=$(( $(date +%s) - T0 ))
  if [ "$el" -lt "${TEST_IF_BELOW:-400}" ]; then
    timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/hw/test_moe_flat.py > "$W/gpu-test.log" 2>&1
    tail -1 "$W/gpu-test.log"
  fi
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu --format=csv > "$W/smi-end.txt" 2>&1
echo "elapsed $(( $(date +%s) - T0 )) s"
tar czf "$O/$TGZ" -C "$W" . && ls -la "$O"
