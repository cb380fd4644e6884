#!/usr/bin/env bash
# PersistentSm90's tile schedulers (hw/attention/fa4_schedulers.py) on one H200: smoke (static kernels, then the
# dynamic ones, each process under its own timeout: a hang loses only its group), then the matched-pair sweep
# with the kernels that passed. Run from the repo root with $OUT set and the FA4 stack importable. Writes
# $OUT/${RUN:-pers5}/ (smoke JSON + logs, attention-fa4/ records). ~4 min. An empty STATIC_KERNELS or
# DYNAMIC_KERNELS skips that group; VARIANTS_BASE names the stock variants timed beside them.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
: "${OUT:?set OUT to the output folder}"
D="$OUT/${RUN:-pers5}"
mkdir -p "$D"
PY=${PYTHON:-python3}
SMOKE="benchmarks/gpu/fa4_persistent_smoke.py --seq-lens ${SMOKE_M:-8192}"
: "${STATIC_KERNELS=drain,stagger,drain1,staggerll}" "${DYNAMIC_KERNELS=draindyn,staggerdyn,staggerlldyn}"
if [ -n "$STATIC_KERNELS" ]; then
  timeout "${SMOKE_TIMEOUT:-90}" "$PY" $SMOKE --out "$D/fa4-persistent-smoke.json" \
    --kernels "$STATIC_KERNELS" --passed "$D/passed-static.txt" >"$D/fa4-persistent-smoke.log" 2>&1
  echo "smoke (static) exit status $?" | tee -a "$D/fa4-persistent-smoke.log"
fi
if [ -n "$DYNAMIC_KERNELS" ]; then
  timeout "${SMOKE_TIMEOUT:-90}" "$PY" $SMOKE --out "$D/fa4-persistent-smoke-dynamic.json" \
    --kernels "$DYNAMIC_KERNELS" --passed "$D/passed-dynamic.txt" >"$D/fa4-persistent-smoke-dynamic.log" 2>&1
  echo "smoke (dynamic) exit status $?" | tee -a "$D/fa4-persistent-smoke-dynamic.log"
fi
passed=$(cat "$D/passed-static.txt" "$D/passed-dynamic.txt" 2>/dev/null | tr ',' '\n' | grep -v '^drain$' | grep . | paste -sd, -)
echo "passed: $passed"
# the local-last order alone only if its dynamic form did not pass
case ",$passed," in *,staggerlldyn,*) passed=$(echo "$passed" | tr ',' '\n' | grep -v '^staggerll$' | paste -sd, -);; esac
V="${VARIANTS_BASE:-fa4,cudnn,ce,serial_fa4,pipelined_g2,pipelined_g4,fused_vmm_cm,pfa4}"
for k in ${passed//,/ }; do
  V="$V,pfa4_$k"
  case "$k" in stagger*) V="$V,fused_vmm_pers_$k";; esac
done
echo "variants: $V"
OUT="$D" FA4_TIMEOUT="${FA4_TIMEOUT:-240}" bash benchmarks/gpu/attention_fa4.sh --tile-mn '' --pers-diag "$passed" \
  --variants "$V" --seq-lens "${SEQ_LENS:-65536,16384,32768,8192}" --trials "${TRIALS:-20}" --pairs "${PAIRS:-30}" \
  --budget-s "${BUDGET_S:-200}"
