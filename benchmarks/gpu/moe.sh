#!/usr/bin/env bash
# Fused MoE FFN on one H200 (issue 6): correctness checks, then expert-wave vs interleaved, remote stores
# (W-1 ranks host-mapped) and local, the grouped-GEMM baseline and a separate Combine copy; records,
# tile logs and the simulator's predicted winner into $OUT/moe/. Run from the repo root with $OUT set.
# Budget: <= 4 min wall (the bench stops starting configurations after --budget-s, default 170 s).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT/moe"
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/moe/clocks-start.txt"
timeout 225 "$PY" -m xstage.hw.moe.bench --out "$OUT/moe" --overwrite --budget-s "${MOE_BUDGET_S:-170}" "$@" 2>&1 \
  | tee "$OUT/moe/log.txt"
rc=${PIPESTATUS[0]}
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/moe/clocks-end.txt"
echo "moe.sh: bench exit status $rc"
exit "$rc"
