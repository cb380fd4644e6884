#!/usr/bin/env bash
# FlashAttention–A2A on one H200 (issue 5): correctness checks, then the §5.3 timing sweep.
# Run from the repo root with $OUT set; writes $OUT/attention/ (records, checks, log). ~3-5 min.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
mkdir -p "$OUT/attention"
gpu_state "$OUT/attention/clocks-start.txt"
# SM clock, power and throttle reasons every 250 ms through the run (DVFS shows up in the long-M times)
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv \
  -lms 250 > "$OUT/attention/smi-trace.csv" 2>/dev/null &
SMI=$!
# 1) correctness + timing sweep (exit status 1 if any check failed; the records are written either way)
timeout 300 "$PY" -m xstage.hw.attention.bench --out "$OUT/attention" --overwrite "$@" 2>&1 | tee "$OUT/attention/log.txt"
rc=${PIPESTATUS[0]}
kill "$SMI" 2>/dev/null
# (the W-rank symmetric-memory path: benchmarks/gpu/attention_dist.sh; W=1 SMALL=1 for one GPU)
gpu_state "$OUT/attention/clocks-end.txt" clocks.sm,temperature.gpu,power.draw
echo "attention.sh: bench exit status $rc"
exit "$rc"
