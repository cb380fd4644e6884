#!/usr/bin/env bash
# FlashAttention + All-to-All on W GPUs of one node (issue 8, run 2): Fused vs Serial vs Serial-best
# (SDPA + NCCL all_to_all), 3 heads per rank, d = 128, M = 8K..64K. One process per GPU (torchrun).
# Run from the repo root with $OUT set; writes $OUT/attention-dist/ (kernel + tile records, checks, log).
#   bash benchmarks/gpu/attention_dist.sh               # W=8 on the 8-GPU node: ~3-4 min, hard limit 8 min
#   W=1 SMALL=1 bash benchmarks/gpu/attention_dist.sh   # smoke test on one GPU: M = 4K, 8K; hard limit 2.5 min
# Extra arguments go to xstage.hw.attention.dist, e.g. --config '{"block_n": 128, "num_stages": 3, "tma": true}'
# (skips the tuning) or --eager (no CUDA graphs). Exit status: 1 if a check failed, 124 if the limit was hit.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONUNBUFFERED=1
W=${W:-8}
DIR="$OUT/attention-dist"
mkdir -p "$DIR"
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  | tee "$DIR/clocks-start.txt"
nvidia-smi topo -m >"$DIR/nvidia-smi-topo.txt" 2>&1 || true
need_gpus "$W" attention_dist.sh
if [ -n "${SMALL:-}" ]; then
  # M = 4K and 8K, tuning and store pick at 8K, no separate check phase (every M is still checked before it is timed)
  args=(--seq-lens 4096,8192 --tune-seq-len 8192 --check-seq-lens none --trials 20)
  limit=150
else
  args=()   # M = 8K..64K, checks at M = 2048 first, tuning at 16K, 25 trials
  limit=480
fi
# correctness (check phase, then every M before its timing), tuning on rank 0, the timed sweep; the records
# are saved after every M, so a run stopped by the limit keeps what it measured
timeout -k 15 "$limit" "$PY" -m torch.distributed.run --standalone --nproc-per-node="$W" -m xstage.hw.attention.dist \
  --out "$DIR" --overwrite "${args[@]}" "$@" 2>&1 | tee "$DIR/log.txt"
rc=${PIPESTATUS[0]}
nvidia-smi --query-gpu=index,clocks.sm,temperature.gpu,power.draw --format=csv | tee "$DIR/clocks-end.txt"
echo "attention_dist.sh: W=$W exit status $rc (records: $DIR)"
exit "$rc"
