#!/usr/bin/env bash
# fatri7 (session 9): ONE device call for the pre-registered regime-key run (data/predictions/fa-regime-preregistration.md):
# an nvidia-smi trace (50 ms) beside everything; attention_triton_sweep5.py over the six configurations, 3 interleaved
# repeats, 8 trials, with each variant's paired-timing host times (--paired-marks); then, until a deadline counted from
# this script's start, attention_triton_clock.py's idle-gap pairs. Run after stage.sh's prelude (in the staged copy).
# Everything goes under $OUT/work/r and comes back as $OUT/regime.tgz (and the two logs).
. "$(dirname "$0")/common.sh"
T0=$SECONDS
W=$OUT/work/r
mkdir -p "$W"
smi_trace_start "$W"
PTS=${PTS:-65536:1,47104:6,73728:1,43008:6,49152:3,61440:3}
timeout "${SWEEP_S:-115}" python3 benchmarks/gpu/attention_triton_sweep5.py --out "$W/attention" --points "$PTS" \
    --repeats 3 --trials 8 --paired-marks > "$W/sweep.log" 2>&1
echo "sweep rc $? at $((SECONDS - T0)) s"
cat "$W/sweep.log"
LEFT=$(( ${DEADLINE_S:-150} - (SECONDS - T0) ))
if [ "$LEFT" -gt 15 ]; then
  timeout "$LEFT" python3 benchmarks/gpu/attention_triton_clock.py --out "$W/clock" \
      --points "${CLOCK_PTS:-57344,65536:3:64,65536,49152}" --pairs 8 > "$W/clock.log" 2>&1
  echo "clock rc $? at $((SECONDS - T0)) s (limit $LEFT s)"
  cat "$W/clock.log"
else
  echo "clock diagnostics skipped: $LEFT s left"
fi
smi_trace_stop "$W"
cp "$W/sweep.log" "$OUT/sweep.log"; cp "$W/clock.log" "$OUT/clock.log" 2>/dev/null
tar czf "$OUT/regime.tgz" -C "$OUT/work" . && rm -rf "$OUT/work"     # at most 8 files come back
ls -la "$OUT"
echo "end $(date -u +%FT%TZ), $((SECONDS - T0)) s"
