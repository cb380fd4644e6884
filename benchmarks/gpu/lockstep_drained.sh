#!/usr/bin/env bash
# lockstep (session 8): one device call: install, the end-fence GPU test, the pre-registered lockstep finite runs.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p $OUT/work
python3 -m pip install -q --no-deps --no-index .carry-lead/whl/*.whl 2>&1 | tail -2
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -2
python3 -c "import xstage, simpy; print('import ok')" || exit 3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv > $OUT/work/gpu-start.txt 2>&1
cat $OUT/work/gpu-start.txt
D=$OUT/work/lockstep-drained-${XSTAGE_GIT_COMMIT:0:7}
timeout 170 python3 benchmarks/gpu/lockstep_drained.py --out $D --budget-s 110 > $OUT/work/lockstep-drained.log 2>&1
echo "lockstep_drained rc $?"; tail -4 $OUT/work/lockstep-drained.log
timeout 45 python3 -m pytest -q -p no:cacheprovider -m gpu tests/hw/test_microbench_end_fence.py -ra > $OUT/work/gpu-test-end-fence.log 2>&1
echo "pytest rc $?"; tail -3 $OUT/work/gpu-test-end-fence.log
tar czf $OUT/res.tgz -C $OUT/work .
ls -la $OUT
