#!/usr/bin/env bash
# call23c (session 23): the third call, pre-registered in data/attention-extra/call23c-preregistration.md, two branches
# by the GPU that comes; no FA4 stack needed (run after the device prelude alone).
#   H200: the pending fresh16 repeat (GRID=fresh16 RUN=-r2 benchmarks/gpu/fresh14.sh), then the MoE sweep below
#   H100: the MoE sweep below: heldout2's exact command (data/moe/run-333d725-heldout2/README.md), the Gluon kernel
#         with the heldout2 run's short.json / long.json (written here, their committed contents), ~70 s
# Writes $OUT/res.tgz (the sweep's folder with nvidia-smi before and after; on an H200 also the calibration).
# (ran with this header written out; it was folded into common.sh's gpu_model afterwards, behaviour unchanged)
HERE=$(dirname "$0")
. "$HERE/common.sh"   # strict mode, no NVLink multicast, $OUT required, gpu_model
export PYTHONUNBUFFERED=1
gpu_model
case "$GPU_MODEL" in
  H200) GRID=fresh16 RUN=-r2 bash "$HERE/fresh14.sh"; mv "$OUT/res.tgz" "$OUT/fresh16-r2.tgz" ;;
  H100) ;;
  *) echo "call23c: neither an H200 nor an H100 ($GPU_NAME); nothing run"; exit 3 ;;
esac
W=/tmp/call23c-work
mkdir -p "$W/held2"
echo '{"gluon": true, "balance": true}' > "$W/short.json"
echo '{"gluon": true, "gluon_num_warps": 8, "gluon_maxnreg": 168, "gluon_stages": 4, "gluon_early_rows": 1}' > "$W/long.json"
cp "$W/short.json" "$W/long.json" "$W/held2/"
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit \
  --format=csv > "$W/held2/smi-start.txt" 2>&1
s=$SECONDS
timeout 300 python3 -m xstage.hw.moe.bench --no-tune --precision bf16 --short-k-kernel "$W/short.json" \
  --long-k-kernel "$W/long.json" --sweep heldout2 --out "$W/held2" > "$W/held2/log.txt" 2>&1
echo "moe bench rc $? in $((SECONDS - s)) s"; tail -n 25 "$W/held2/log.txt"
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active --format=csv \
  > "$W/held2/smi-end.txt" 2>&1
rm -f "$W/held2/moe-tile.parquet"   # the full tile log (~19 MB) stays here, as heldout2's did; moe-tile-small comes back
tar czf "$OUT/res.tgz" -C "$W" held2
ls -la "$OUT" "$W/held2"; date -u
