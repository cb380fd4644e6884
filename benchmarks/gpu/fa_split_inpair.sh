#!/usr/bin/env bash
# fatri8 (session 10): the device call of the pre-registered in-pair runs (data/attention-extra/inpair-preregistration.md,
# rule13-preregistration.md; PTS, REPEATS, PAIRS, SWEEP_S from the environment):
# an nvidia-smi trace (50 ms) beside everything; fa_split_inpair.py over the seven (M, heads) points, 3 interleaved
# repeats, 8 trials, 8 in-pair pairs per block. Run after stage.sh's prelude (in the staged copy). Everything goes
# under $OUT/work/r and comes back as $OUT/inpair.tgz (and the log).
. "$(dirname "$0")/common.sh"
T0=$SECONDS
W=$OUT/work/r
mkdir -p "$W"
smi_trace_start "$W"
PTS=${PTS:-49152:2,49152:4,57344:2,57344:4,49152:3,57344:3,47104:6}
PYTHONUNBUFFERED=1 timeout "${SWEEP_S:-220}" python3 benchmarks/gpu/fa_split_inpair.py --out "$W/attention" \
    --points "$PTS" --repeats "${REPEATS:-3}" --trials 8 --pairs "${PAIRS:-8}" --raw-pairs 1 2>&1 | tee "$W/inpair.log"
echo "inpair rc ${PIPESTATUS[0]} at $((SECONDS - T0)) s"
smi_trace_stop "$W"
cp "$W/inpair.log" "$OUT/inpair.log"
ls -la "$W" "$W/attention"
tar czf "$OUT/inpair.tgz" -C "$OUT/work" . && rm -rf "$OUT/work"     # at most 8 files come back
ls -la "$OUT"
echo "end $(date -u +%FT%TZ), $((SECONDS - T0)) s"
