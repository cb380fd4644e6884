#!/usr/bin/env bash
# tri19 (session 14): the device call of rule 19 (data/attention-extra/rule19-preregistration.md): an nvidia-smi
# trace (50 ms) beside fa_rule19.py over the pre-registered plan. Run after take.sh's prelude. Eight files come back
# under $OUT: rule19-pairs.parquet, inpair-launch.parquet, inpair-wave.parquet, rule19-meta.json, log.txt,
# smi-trace.csv, clocks-start.txt, clocks-end.txt. BUDGET_S: no point starts after it; the sweep is cut at SWEEP_S.
. "$(dirname "$0")/common.sh"
T0=$SECONDS
smi_trace_start "$OUT"
PYTHONUNBUFFERED=1 timeout "${SWEEP_S:-330}" python3 benchmarks/gpu/fa_rule19.py --out "$OUT" --budget-s "${BUDGET_S:-270}" \
    --plan "${PLAN:-data/attention-extra/fa-rule19-preregistered-h200-pcie-host.json}" 2>&1 | tee "$OUT/log.txt"
echo "fa_rule19 rc ${PIPESTATUS[0]} at $((SECONDS - T0)) s"
smi_trace_stop "$OUT"
ls -la "$OUT"
echo "end $(date -u +%FT%TZ), $((SECONDS - T0)) s"
