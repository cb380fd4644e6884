#!/usr/bin/env bash
# tri21d (session 15): the device call of rule 21 (data/attention-extra/rule21-preregistration.md): fa_rule20.py over
# rule 21's plan (10 points, 16 rounds of the keep arm, 8 of the hbm control, 8 warm pairs, the pair order random
# and seeded per block) beside an nvidia-smi trace (50 ms). Run after take.sh's prelude. Seven files come back under
# $OUT: rule20-pairs.parquet, rule20-blocks.parquet, rule20-meta.json, log.txt, smi-trace.csv, clocks-start.txt,
# clocks-end.txt. BUDGET_S: no round starts after it; the sweep is cut at SWEEP_S. Scored by
# python benchmarks/fa_rule21.py score --run attention-runs/<run> --plan attention-extra/fa-rule21-plan.json
. "$(dirname "$0")/common.sh"
traced_sweep fa_rule20 data/attention-extra/fa-rule21-plan.json 420 560
