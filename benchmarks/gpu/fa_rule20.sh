#!/usr/bin/env bash
# tri20 (session 14): the device call of rule 20 (data/attention-extra/rule20-preregistration.md): an nvidia-smi
# trace (50 ms) beside fa_rule20.py over the plan. Run after take.sh's prelude. Seven files come back under $OUT:
# rule20-pairs.parquet, rule20-blocks.parquet, rule20-meta.json, log.txt, smi-trace.csv, clocks-start.txt,
# clocks-end.txt. BUDGET_S: no round starts after it; the sweep is cut at SWEEP_S.
. "$(dirname "$0")/common.sh"
T0=$SECONDS
smi_trace_start "$OUT"
PYTHONUNBUFFERED=1 timeout "${SWEEP_S:-230}" python3 benchmarks/gpu/fa_rule20.py --out "$OUT" --budget-s "${BUDGET_S:-110}" \
    --plan "${PLAN:-data/attention-extra/fa-rule20-plan.json}" 2>&1 | tee "$OUT/log.txt"
echo "fa_rule20 rc ${PIPESTATUS[0]} at $((SECONDS - T0)) s"
smi_trace_stop "$OUT"
ls -la "$OUT"
echo "end $(date -u +%FT%TZ), $((SECONDS - T0)) s"
