#!/usr/bin/env bash
# call23b (session 23): the second call, pre-registered in data/attention-extra/call23b-preregistration.md after
# call23's result, two branches by the GPU that comes. FA4 wheels staged under /tmp/wheels as for call23.sh.
#   H200: call23.sh (the pending fresh16 repeat, then every GPU-marked test, the smoke and the FA4 sweep)
#   H100: the default FA4 sweep again (attention_fa4.sh, seed 16: $OUT/a) and M = 64K alone with another seed
#         ($OUT/b: --seq-lens 65536 --seed 17), each with nvidia-smi's clocks, power and throttle reasons sampled
#         every second beside it (~3 min)
# Writes $OUT/res.tgz (everything the H100 branch measured) and the H200 branch's folders.
# (ran with this header written out; it was folded into common.sh's gpu_model afterwards, behaviour unchanged)
HERE=$(dirname "$0")
. "$HERE/common.sh"   # strict mode, no NVLink multicast, $OUT required, gpu_model
export PYTHONUNBUFFERED=1
gpu_model
case "$GPU_MODEL" in
  H200) exec bash "$HERE/call23.sh" ;;
  H100) ;;
  *) echo "call23b: neither an H200 nor an H100 ($GPU_NAME); nothing run"; exit 3 ;;
esac
W=/tmp/call23b-work
mkdir -p "$W"
. "$HERE/fa4_stack.sh"
fa4_stack "$W" || exit 1
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit \
  --format=csv > "$W/gpu-start.txt" 2>&1
sweep() {  # NAME TIMEOUT ARGS...: one FA4 sweep into $W/NAME with a 1 s nvidia-smi sample beside it
  local n=$1 to=$2 s=$SECONDS; shift 2
  mkdir -p "$W/$n"
  nvidia-smi --query-gpu=timestamp,clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active \
    --format=csv -l 1 > "$W/$n/smi.csv" 2>&1 &
  local smi=$!
  OUT="$W/$n" FA4_TIMEOUT=$to bash "$HERE/attention_fa4.sh" "$@" > /dev/null 2>&1
  kill "$smi" 2>/dev/null
  echo "sweep $n in $((SECONDS - s)) s"; tail -n 3 "$W/$n/attention-fa4/log.txt"
  tar czf "$OUT/res.tgz" -C "$W" .   # after every step: a call stopped at its limit still brings back what ran
}
sweep a 200
sweep b 150 --seq-lens 65536 --seed 17
date -u
