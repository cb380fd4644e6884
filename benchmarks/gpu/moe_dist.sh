#!/usr/bin/env bash
# MoE at expert parallelism over W GPUs (issue 8 run 3, issue 6's symmetric-memory Combine): one process per
# GPU, Combine rows stored by the fused kernel straight into the peers' torch symmetric-memory buffers.
# Correctness first (every rank's buffer poisoned, checked against the float32 reference, written exactly
# once over all ranks, error flag 0; bf16 and W8A8, both schedules), then per configuration expert-wave vs
# interleaved (remote and local stores), torch._grouped_mm + a Combine copy through the symmetric pointers.
# Rank 0 writes kernel records (all ranks' rows), checks and a table into $OUT/moe-dist/ (or $MOE_DIST_DIR).
#
#   OUT=... bash benchmarks/gpu/moe_dist.sh                  # W = 8 GPUs, the full sweep, <= 8 min
#   OUT=... W=1 SMALL=1 bash benchmarks/gpu/moe_dist.sh      # the one-GPU smoke test, <= 2 min
# Extra arguments go to xstage.hw.moe.dist (e.g. --dispatch regen, --lead 20, --max-configs 4).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONUNBUFFERED=1
W=${W:-8}
DIR=${MOE_DIST_DIR:-$OUT/moe-dist}
mkdir -p "$DIR"
need_gpus "$W" moe_dist.sh
if [ -n "${SMALL:-}" ]; then
  ARGS=(--sweep small --trials 20 --budget-s "${MOE_DIST_BUDGET_S:-60}"); LIMIT=${MOE_DIST_TIMEOUT:-110}
else
  ARGS=(--sweep full --trials 25 --budget-s "${MOE_DIST_BUDGET_S:-330}"); LIMIT=${MOE_DIST_TIMEOUT:-470}
fi
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  | tee "$DIR/clocks-start.txt"
nvidia-smi topo -m > "$DIR/nvidia-smi-topo.txt" 2>&1 || true
# torchrun --standalone --nproc-per-node=$W, spelled as the module so no console script is needed; rank 0
# saves the records after every configuration, so a run stopped by the limit keeps what it measured
timeout -k 15 "$LIMIT" "$PY" -m torch.distributed.run --standalone --nproc-per-node="$W" -m xstage.hw.moe.dist \
  --out "$DIR" "${ARGS[@]}" "$@" 2>&1 | tee "$DIR/log.txt"
rc=${PIPESTATUS[0]}
nvidia-smi --query-gpu=index,clocks.sm,temperature.gpu,power.draw --format=csv | tee "$DIR/clocks-end.txt"
if [ -f "$DIR/moe-kernel.parquet" ]; then
  "$PY" -m xstage.cli results moe --data "$DIR" --platform h200-nvlink 2>&1 | tail -n 12
fi
echo "moe_dist.sh: W=$W exit status $rc (124 = timed out; records saved up to the last finished configuration)"
exit "$rc"
