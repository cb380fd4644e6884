#!/usr/bin/env bash
# session 9: one device call: the store kernel's builds side by side (SASS of burst_kernel under nvcc, and the same
# burst configurations through each build, benchmarks/gpu/microbench_ab.py), then the GPU-marked microbenchmark and
# calibration tests. SRC: a folder with before.cu / flag.cu / current.cu (header inlined).
source benchmarks/gpu/common.sh
SRC=${SRC:?set SRC to the folder of the sources}
start_run ab 200
gpu_state "$D/gpu-start.txt"
for n in before flag current; do
  nvcc -cubin -arch=sm_90 -std=c++17 -o "$D/$n.cubin" "$SRC/$n.cu" > "$D/nvcc-$n.log" 2>&1 || echo "nvcc $n failed"
  cuobjdump -sass -fun burst_kernel "$D/$n.cubin" 2>/dev/null | grep -E '^\s+/\*[0-9a-f]{4}\*/' \
    | sed -E 's#/\*[0-9a-f]{4}\*/##; s#;.*##' > "$D/$n.sass"
  echo "sass $n: $(wc -l < "$D/$n.sass") instructions"
done
for n in flag current; do
  echo "sass before vs $n: $(diff "$D/before.sass" "$D/$n.sass" | grep -c '^[<>]') differing lines"
done
cuobjdump -sass -fun burst_kernel_end_fence "$D/current.cubin" 2>/dev/null | grep -E '^\s+/\*[0-9a-f]{4}\*/' \
  | sed -E 's#/\*[0-9a-f]{4}\*/##; s#;.*##' > "$D/current-end-fence.sass"
echo "sass current vs its end-fence build: $(wc -l < "$D/current-end-fence.sass") instructions," \
  "$(diff "$D/current.sass" "$D/current-end-fence.sass" | grep -c '^[<>]') differing lines"
step "A/B runs"
timeout $(( $(left) - 60 )) $PY benchmarks/gpu/microbench_ab.py --end-fence --source "before=$SRC/before.cu" --source "flag=$SRC/flag.cu" \
  --out "$D/microbench-ab.json" 2>&1 | tee "$D/ab.log" | grep -v '^\[ab\]'
step "GPU tests"
timeout 50 $PY -m pytest -q -p no:cacheprovider -m gpu tests/hw/test_microbench_end_fence.py tests/hw/test_calib_gpu.py \
  -ra > "$D/gpu-tests.log" 2>&1; echo "pytest rc $?"; tail -3 "$D/gpu-tests.log"
gpu_state "$D/gpu-end.txt"
tar czf "$OUT/ab.tgz" -C "$OUT" ab
