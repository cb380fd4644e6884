#!/usr/bin/env bash
# tri20 (session 14): the device call of rule 20 (data/attention-extra/rule20-preregistration.md): an nvidia-smi
# trace (50 ms) beside fa_rule20.py over the plan. Run after take.sh's prelude. Seven files come back under $OUT:
# rule20-pairs.parquet, rule20-blocks.parquet, rule20-meta.json, log.txt, smi-trace.csv, clocks-start.txt,
# clocks-end.txt. BUDGET_S: no round starts after it; the sweep is cut at SWEEP_S.
. "$(dirname "$0")/common.sh"
traced_sweep fa_rule20 data/attention-extra/fa-rule20-plan.json 110 230
