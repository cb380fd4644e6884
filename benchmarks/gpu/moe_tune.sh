#!/usr/bin/env bash
# Issue 17, step 1: where the fused MoE FFN's GEMM (remote stores off) loses to torch._grouped_mm /
# torch._scaled_grouped_mm, over tile configurations, with a no-wait order beside it
# (benchmarks/moe_tune.py). Writes $OUT/tune/tune.jsonl, log.txt and the clocks. Run from the repo root.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
mkdir -p "$OUT/tune"
gpu_state "$OUT/tune/clocks-start.txt"
PYTHONUNBUFFERED=1 timeout "${TUNE_TIMEOUT_S:-330}" "$PY" benchmarks/moe_tune.py --out "$OUT/tune" \
  --budget-s "${TUNE_BUDGET_S:-300}" "$@" 2>&1 | tee "$OUT/tune/log.txt"
rc=${PIPESTATUS[0]}
gpu_state "$OUT/tune/clocks-end.txt" clocks.sm,temperature.gpu,power.draw
echo "moe_tune.sh: exit status $rc"
exit "$rc"
