#!/usr/bin/env bash
# Fused MoE FFN on one H200 (issue 6): correctness checks, then expert-wave vs interleaved, remote stores
# (W-1 ranks host-mapped) and local, the grouped-GEMM baseline and a separate Combine copy; records,
# tile logs and the measured medians the simulator replays (`xstage results moe --data $OUT`) into $OUT/moe/. Run from the repo root with $OUT set.
# Budget: <= 4 min wall (the bench stops starting configurations after --budget-s, default 170 s).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
mkdir -p "$OUT/moe"
gpu_state "$OUT/moe/clocks-start.txt"
timeout 225 "$PY" -m xstage.hw.moe.bench --out "$OUT/moe" --overwrite --budget-s "${MOE_BUDGET_S:-170}" "$@" 2>&1 \
  | tee "$OUT/moe/log.txt"
rc=${PIPESTATUS[0]}
gpu_state "$OUT/moe/clocks-end.txt" clocks.sm,temperature.gpu,power.draw
echo "moe.sh: bench exit status $rc"
exit "$rc"
