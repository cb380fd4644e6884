# Sourced by every benchmarks/gpu/*.sh (run from the repo root):
#   strict mode, no NVLink multicast anywhere, $OUT required, $PY (default python3), and
#   gpu_state FILE [FIELDS]   nvidia-smi's name, clocks, temperature and power (or FIELDS) into FILE and the log
#   need_gpus W SCRIPT         exit 1 with one line unless this machine has at least W GPUs
#   start_run DIR BUDGET_S [TQDM_S]   D=$OUT/DIR (made), T0 = now, BUDGET = BUDGET_S, status=0, and
#                              TQDM_MININTERVAL (default TQDM_S, else 5 s); then
#   step MSG                   "== [<seconds since T0>s] MSG" on stderr
#   left                       the seconds left of BUDGET
#   summary_table ...          the side-by-side table of summary JSON files (benchmarks/gpu/summary_table.py)
#   smi_trace_start DIR        the GPU's clocks, temperature, power and throttle reasons into DIR/clocks-start.txt
#                              (and the log), then every 50 ms into DIR/smi-trace.csv in the background ($SMI)
#   smi_trace_stop DIR         stops that trace and writes DIR/clocks-end.txt
#   traced_sweep NAME PLAN BUDGET_S SWEEP_S   benchmarks/gpu/NAME.py --out $OUT --budget-s ${BUDGET_S:-BUDGET_S}
#                              --plan ${PLAN:-PLAN} under timeout ${SWEEP_S:-SWEEP_S}, its output into $OUT/log.txt,
#                              beside the 50 ms trace (smi_trace_start / _stop on $OUT); then "NAME rc <status> at
#                              <s> s", the files under $OUT and the end time (rules 19, 20, 21: fa_rule*.sh)
#   gpu_model                  prints the GPU's name and the date; GPU_NAME = the name, GPU_MODEL = H200, H100 or other
#                              (the scripts that branch on the GPU that came: call23*.sh)
#   h100_branch NAME           on an H200 exec call24.sh (its H200 branch), on an H100 return, else exit 3 (call25.sh,
#                              call26.sh)
#   calib_start W              W = the work folder of a run of `xstage calibrate` steps (made), the GPU's identity
#                              into W/gpu-start.txt (call24.sh, call25.sh)
#   calib_step NAME TIMEOUT TAIL ARGS...   `xstage calibrate ARGS --name NAME --out W/NAME` under timeout, its log in
#                              W/NAME.log; prints its status, time and last TAIL log lines, then packs W into
#                              $OUT/res.tgz (after every step: a call stopped at its limit brings back what ran)
#   calib_end                  the GPU's clocks after the steps into W/gpu-end.txt, the date, W packed again
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
: "${OUT:?set OUT to the output folder}"
PY=${PYTHON:-python3}

gpu_state() {
  nvidia-smi --query-gpu="${2:-name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw}" --format=csv \
    | tee "$1"
}

need_gpus() {
  local ngpu
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "$ngpu" -lt "$1" ]; then
    echo "$2: W=$1 ranks need $1 GPUs; this machine has $ngpu"
    exit 1
  fi
}

start_run() {
  export TQDM_MININTERVAL=${TQDM_MININTERVAL:-${3:-5}}
  D="$OUT/$1"
  mkdir -p "$D"
  T0=$(date +%s)
  BUDGET=$2
  status=0
}

step() { echo "== [$(( $(date +%s) - T0 ))s] $*" >&2; }

left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

summary_table() { "$PY" "$(dirname "${BASH_SOURCE[0]}")/summary_table.py" "$@"; }

SMI_FIELDS=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,power.limit,clocks_event_reasons.active

smi_trace_start() {
  (date -u; nvidia-smi --query-gpu=$SMI_FIELDS --format=csv) > "$1/clocks-start.txt" 2>&1
  cat "$1/clocks-start.txt"
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv \
      -lms 50 > "$1/smi-trace.csv" 2>&1 &
  SMI=$!
}

smi_trace_stop() {
  kill "$SMI" 2>/dev/null
  (date -u; nvidia-smi --query-gpu=$SMI_FIELDS --format=csv) > "$1/clocks-end.txt" 2>&1
}

traced_sweep() {
  local name=$1 plan=$2 budget=$3 sweep=$4 t0=$SECONDS
  smi_trace_start "$OUT"
  PYTHONUNBUFFERED=1 timeout "${SWEEP_S:-$sweep}" python3 "benchmarks/gpu/$name.py" --out "$OUT" \
      --budget-s "${BUDGET_S:-$budget}" --plan "${PLAN:-$plan}" 2>&1 | tee "$OUT/log.txt"
  echo "$name rc ${PIPESTATUS[0]} at $((SECONDS - t0)) s"
  smi_trace_stop "$OUT"
  ls -la "$OUT"
  echo "end $(date -u +%FT%TZ), $((SECONDS - t0)) s"
}

gpu_model() {
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  echo "GPU: $GPU_NAME"; date -u
  case "$GPU_NAME" in *H200*) GPU_MODEL=H200 ;; *H100*) GPU_MODEL=H100 ;; *) GPU_MODEL=other ;; esac
}

h100_branch() {   # NAME: an H200 runs call24's H200 branch instead (exec), an H100 goes on, any other GPU exits 3
  gpu_model
  case "$GPU_MODEL" in
    H200) exec bash "$(dirname "${BASH_SOURCE[0]}")/call24.sh" ;;
    H100) ;;
    *) echo "$1: neither an H100 nor an H200 ($GPU_NAME); nothing run"; exit 3 ;;
  esac
}

calib_start() {
  W=$1
  mkdir -p "$W"
  gpu_state "$W/gpu-start.txt" \
    name,uuid,driver_version,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.width.current,temperature.gpu,power.draw
}

calib_step() {
  local n=$1 to=$2 tail_n=$3 s=$SECONDS
  shift 3
  timeout "$to" python3 -m xstage.cli calibrate "$@" --name "$n" --out "$W/$n" > "$W/$n.log" 2>&1
  echo "calibrate $n rc $? in $((SECONDS - s)) s"; tail -"$tail_n" "$W/$n.log"
  tar czf "$OUT/res.tgz" -C "$W" .
}

calib_end() {
  gpu_state "$W/gpu-end.txt" clocks.sm,temperature.gpu,power.draw
  date -u
  tar czf "$OUT/res.tgz" -C "$W" .
  ls -la "$OUT"
}
