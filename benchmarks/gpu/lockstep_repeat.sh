#!/usr/bin/env bash
# session 10: one device call: the pre-registered lockstep finite runs (benchmarks/gpu/lockstep_drained.py, unchanged)
# three times in three separate processes, to measure how far one build reproduces itself
# (data/calibration-extra/lockstep-repeat-s10-preregistration.md). Results: $OUT/repeat.tgz.
source "$(dirname "$0")/common.sh"
start_run repeat 240
sha=${XSTAGE_GIT_COMMIT:0:7}
gpu_state "$D/gpu-start.txt"
for r in 1 2 3; do
  step "repeat $r"
  timeout $(( $(left) - 20 )) $PY benchmarks/gpu/lockstep_drained.py --out "$D/lockstep-repeat-$sha-r$r" --budget-s 60 \
    > "$D/r$r.log" 2>&1 || { echo "repeat $r failed"; status=1; }
  tail -2 "$D/r$r.log"
done
gpu_state "$D/gpu-end.txt"
tar czf "$OUT/repeat.tgz" -C "$D" .
exit $status
