#!/usr/bin/env bash
# Every GPU-marked test with the optional stacks installed (flash-attn-4 + CuTe DSL + quack, nvshmem4py), then the
# PersistentSm90 smoke and the FA4 sweep (benchmarks/gpu/attention_fa4.sh). The wheels were staged under
# /tmp/wheels by the earlier calls of the same warm lease (../shared/DEVICE-WHEELS.md, ../shared/tools/wheel-parts.sh):
# this script joins the split parts, installs everything into /tmp/site and puts it on PYTHONPATH.
# Run from the repo root after the device prelude (it installs .whl/ and the checkout) with $OUT set.
# Writes $OUT/gpu-tests/ (install log, package versions, GPU state, pytest output, smoke JSON) and
# $OUT/attention-fa4/ (the sweep's records). BUDGET_S (default 540) bounds the whole script.
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
D="$OUT/gpu-tests"
mkdir -p "$D"
T0=$(date +%s)
left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - T0) )); }
step() { echo "== [$(( $(date +%s) - T0 ))s] $*" | tee -a "$D/steps.txt" >&2; }

step "join the wheel parts and install into /tmp/site"
. "$(dirname "$0")/fa4_stack.sh"
fa4_stack "$D" || exit 1
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,pcie.link.gen.current,pcie.link.width.current \
  --format=csv > "$D/gpu.txt" 2>&1

step "pytest -m gpu (every GPU-marked test)"
# the device call travels without data/ (device_tree.sh hide): modules that read records at import fail to
# collect; those hold no GPU test, so collection errors are reported and the run goes on
timeout -k 5 "$(( $(left) - 200 ))" python3 -m pytest -q -p no:cacheprovider -m gpu -rs --continue-on-collection-errors tests/hw tests/sim tests/compare \
  tests/cli > "$D/pytest.txt" 2>&1
echo "pytest exit status $?" | tee -a "$D/pytest.txt" >&2
tail -n 15 "$D/pytest.txt" >&2

step "PersistentSm90 smoke"
timeout -k 5 90 python3 benchmarks/gpu/fa4_persistent_smoke.py --out "$D/fa4-persistent-smoke.json" > "$D/smoke.log" 2>&1
echo "smoke exit status $?" | tee -a "$D/smoke.log" >&2

t=$(( $(left) - 15 ))
if [ "$t" -gt 90 ]; then
  step "FA4 sweep (timeout ${t}s)"
  FA4_TIMEOUT=$t bash benchmarks/gpu/attention_fa4.sh > /dev/null 2>&1
  tail -n 4 "$OUT/attention-fa4/log.txt" >&2
else
  step "FA4 sweep skipped (${t}s left)"
fi
step "done"
