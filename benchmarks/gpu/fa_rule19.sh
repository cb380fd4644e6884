#!/usr/bin/env bash
# tri19 (session 14): the device call of rule 19 (data/attention-extra/rule19-preregistration.md): an nvidia-smi
# trace (50 ms) beside fa_rule19.py over the pre-registered plan. Run after take.sh's prelude. Eight files come back
# under $OUT: rule19-pairs.parquet, inpair-launch.parquet, inpair-wave.parquet, rule19-meta.json, log.txt,
# smi-trace.csv, clocks-start.txt, clocks-end.txt. BUDGET_S: no point starts after it; the sweep is cut at SWEEP_S.
. "$(dirname "$0")/common.sh"
traced_sweep fa_rule19 data/attention-extra/fa-rule19-preregistered-h200-pcie-host.json 270 330
