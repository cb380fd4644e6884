#!/usr/bin/env bash
# FlashAttention–A2A on one H200 (issue 5): correctness checks, then the §5.3 timing sweep.
# Run from the repo root with $OUT set; writes $OUT/attention/ (records, checks, log). ~3-5 min.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT/attention"
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/attention/clocks-start.txt"
# SM clock, power and throttle reasons every 250 ms through the run (DVFS shows up in the long-M times)
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv \
  -lms 250 > "$OUT/attention/smi-trace.csv" 2>/dev/null &
SMI=$!
# 1) correctness + timing sweep (exit status 1 if any check failed; the records are written either way)
timeout 300 "$PY" -m xstage.hw.attention_bench --out "$OUT/attention" --overwrite "$@" 2>&1 | tee "$OUT/attention/log.txt"
rc=${PIPESTATUS[0]}
kill "$SMI" 2>/dev/null
# 2) the W-rank symmetric-memory path at world size 1 (smoke test; non-fatal)
if [ -z "${SKIP_DIST:-}" ]; then
  timeout 45 "$PY" -m torch.distributed.run --standalone --nproc_per_node 1 -m xstage.hw.attention_dist \
    --seq-len 2048 --heads 3 --head-dim 128 2>&1 | tail -n 20 | tee "$OUT/attention/dist-w1.txt"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv | tee "$OUT/attention/clocks-end.txt"
echo "attention.sh: bench exit status $rc"
exit "$rc"
