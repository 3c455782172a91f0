#!/usr/bin/env bash
# The GPU tier: tempo-rl's GPU tests and benches on a host with a CUDA GPU and GPU vLLM (in tempo-rl's
# Python, or brought by an offline pack: README "Offline GPU hosts"). One log per phase, the benches'
# JSON and the run's metrics go to OUTDIR; a line per phase says how it ended.
#
#   scripts/gpu-check.sh OUTDIR [PHASE ...]      phases, in order: models engines tests bench train stop
#
# OUTDIR (made if missing; a relative one is relative to where the script is started) and the phase
# names are checked before anything runs; every phase runs even if one fails, and the exit status is 1
# when one did (2 for a usage error).
#
# Engines (all on GPU 0, started at once, each with its KV cache size given: vLLM sizes it from the
# whole GPU's free memory, which engines starting beside it change):
#   p  the Qwen3-VL-2B-shaped model, colocated as configs/geo3k-multiturn-qwen3vl-2b.yaml runs it (the
#      `train` phase's own engine: that run adopts it)          port 8120
#   t  two of the tiny model, for the engine-layer tests          ports 8150-8151
#   w  the warm-started tiny policy ($TEMPO_RL_WARM_START; else the tiny model)   port 8160
#   m  the tiny MoE, returning routed experts                     port 8170
# Geo3K rows come from $TEMPO_RL_GEO3K_DIR (default ../shared/data/geo3k).
[ -n "${BASH_VERSION:-}" ] || { echo "scripts/gpu-check.sh: run it with bash (it is not sh)" >&2; exit 2; }
set -uo pipefail
ALL_PHASES=(models engines tests bench train stop)
usage() {
  echo "usage: scripts/gpu-check.sh OUTDIR [PHASE ...]   (phases, in order: ${ALL_PHASES[*]})" >&2
  [ -z "${1:-}" ] || echo "gpu-check: $1" >&2
  exit 2
}
[ $# -ge 1 ] || usage
case "$1" in
  -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  '' | -*) usage "OUTDIR \"$1\" is not a folder name" ;;
esac
for phase in "${@:2}"; do
  [[ " ${ALL_PHASES[*]} " == *" $phase "* ]] || usage "unknown phase \"$phase\""
done
# OUTDIR as the caller means it (relative to where it started, not to the clone this script moves to)
case "$1" in /*) OUT=$1 ;; *) OUT=$PWD/$1 ;; esac
made=$(mkdir -p -- "$OUT" 2>&1) && OUT=$(cd -- "$OUT" && pwd) || usage "cannot make OUTDIR \"$1\": ${made#mkdir: }"
shift
PHASES=("$@")
[ ${#PHASES[@]} -gt 0 ] || PHASES=("${ALL_PHASES[@]}")
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh || exit 1
PY=$TEMPO_RL_PYTHON
STATE=${TEMPO_RL_GPU_CHECK_STATE:-$OUT/state}
GEO3K=${TEMPO_RL_GEO3K_DIR:-$(cd .. && pwd)/shared/data/geo3k}
mkdir -p -- "$STATE" || { echo "gpu-check: cannot make the state folder $STATE (TEMPO_RL_GPU_CHECK_STATE)" >&2; exit 2; }
say() { echo "[gpu-check $(date +%T)] $*" | tee -a "$OUT/summary.log" >&2; }
# The phases after models need its models (written to $STATE/models.env).
need_models() { [ -n "${SHAPED:-}" ] || { say "no models: run the models phase first (or in the same call)"; return 1; }; }
json() { "$PY" -c "import json,sys; print(json.load(sys.stdin)$1)"; }

GPU=(--set model.num_gpus=1 --set model.dtype=bfloat16 --set engines.colocate=true --set engines.gpu_memory_utilization=0.05)
kv() { echo "engines.extra_args=[\"--kv-cache-memory-bytes\",\"$1\"]"; }
models() {
  TINY=$TEMPO_RL_TINY_MODEL
  MOE=$(bin/tempo-rl model tiny --moe --json | json '["path"]') || return 1
  SHAPED=$(bin/tempo-rl model shaped --shape qwen3-vl-2b --device cuda --json | json '["path"]') || return 1
  WARM=${TEMPO_RL_WARM_START:-$TINY}
  printf 'TINY=%s\nMOE=%s\nSHAPED=%s\nWARM=%s\n' "$TINY" "$MOE" "$SHAPED" "$WARM" > "$STATE/models.env"
}
[ -f "$STATE/models.env" ] && source "$STATE/models.env"

# The run of the train phase: the multi-turn 2B config on one GPU, three steps, Geo3K rows from disk.
PRODUCT_CONFIG=configs/geo3k-multiturn-qwen3vl-2b.yaml
product_sets() {
  echo --set "model.path=$SHAPED" --set model.num_gpus=1 --set engines.count=1 \
    --set engines.base_port=8120 --set engines.gpu_memory_utilization=0.35 --set "$(kv 34359738368)" \
    --set engines.max_model_len=8192 --set rollout.max_context_len=8192 --set rollout.max_response_len=1024 \
    --set dataset.kind=geo3k_dir --set "dataset.path=$GEO3K" --set rollout.prompts_per_step=16 \
    --set rollout.n_samples_per_prompt=4 --set rollout.concurrency=64 --set run.steps=3 --set run.eval_interval=0 \
    --set grpo.micro_batch_tokens=8192
}

start_engine() {  # name, then global options (-c FILE, --set K=V)
  local name=$1; shift
  bin/tempo-rl --set "state_dir=$STATE/$name" "$@" engine start --json > "$OUT/engine-$name.json" 2> "$OUT/engine-$name.log"
}
engines() {
  need_models || return 1
  # shellcheck disable=SC2046
  start_engine p -c "$PRODUCT_CONFIG" $(product_sets) &
  start_engine t "${GPU[@]}" --set engines.count=2 --set engines.base_port=8150 --set "$(kv 2147483648)" &
  start_engine w "${GPU[@]}" --set "model.path=$WARM" --set engines.base_port=8160 --set "$(kv 2147483648)" &
  start_engine m "${GPU[@]}" --set "model.path=$MOE" --set rollout.routing_replay=true --set engines.base_port=8170 \
    --set engines.max_model_len=1024 --set rollout.max_context_len=1024 --set rollout.max_response_len=256 --set "$(kv 2147483648)" &
  local failed=0
  for job in $(jobs -p); do wait "$job" || failed=1; done
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv > "$OUT/engines-memory.csv" 2>&1
  return $failed
}

tests() {
  need_models || return 1
  local rc=0
  TEMPO_RL_TEST_GPU_ENGINE_URL=http://127.0.0.1:8160 TEMPO_RL_TEST_GPU_ENGINE_MODEL=$WARM \
    TEMPO_RL_TEST_MOE_ENGINE_URL=http://127.0.0.1:8170 TEMPO_RL_TEST_MOE_ENGINE_DTYPE=bfloat16 TEMPO_RL_TINY_MOE_MODEL=$MOE \
    timeout 1200 "$PY" -m pytest -q -rs -s tests/python/test_engine_compat.py tests/python/test_engine_gpu.py tests/python/test_weight_ipc.py \
    tests/python/test_routing_replay_live.py tests/python/test_lm_head.py tests/python/test_bf16_compute.py \
    tests/python/test_shaped_model.py tests/python/test_data_parallel.py > "$OUT/tests-python.log" 2>&1 || rc=1
  TEMPO_RL_TEST_ENGINE_URLS=http://127.0.0.1:8150,http://127.0.0.1:8151 timeout 900 node --import tsx --test --test-concurrency=1 \
    --test-reporter=spec tests/ts/engine-client.test.ts tests/ts/engine-control.test.ts tests/ts/engine-pool.test.ts \
    > "$OUT/tests-ts.log" 2>&1 || rc=1
  tail -3 "$OUT/tests-python.log" "$OUT/tests-ts.log" >&2
  return $rc
}

bench() {
  need_models || return 1
  local rc=0
  run() { local name=$1; shift; timeout 600 "$PY" "$@" --json > "$OUT/bench-$name.json" 2> "$OUT/bench-$name.log" || { rc=1; say "bench $name failed"; }; }
  # parity first: the weight-sync bench leaves perturbed weights on the engines it syncs
  run parity-tiny bench/logprob-parity.py --engine http://127.0.0.1:8160 --model "$WARM" --data "$GEO3K" --device cuda --compute-dtype bfloat16
  run parity-tiny-fp32-head bench/logprob-parity.py --engine http://127.0.0.1:8160 --model "$WARM" --data "$GEO3K" --device cuda --compute-dtype bfloat16 --lm-head-fp32
  run parity-2b bench/logprob-parity.py --engine http://127.0.0.1:8120 --model "$SHAPED" --data "$GEO3K" --device cuda --compute-dtype bfloat16
  run parity-2b-fp32-head bench/logprob-parity.py --engine http://127.0.0.1:8120 --model "$SHAPED" --data "$GEO3K" --device cuda --compute-dtype bfloat16 --lm-head-fp32
  run sync-tiny-ipc bench/weight-sync.py --engine http://127.0.0.1:8160 --model "$WARM" --sleep-level 2
  run sync-tiny-ipc-level1 bench/weight-sync.py --engine http://127.0.0.1:8160 --model "$WARM" --sleep-level 1
  run sync-2b-ipc bench/weight-sync.py --engine http://127.0.0.1:8120 --model "$SHAPED" --sleep-level 2
  run sync-2b-ipc-awake bench/weight-sync.py --engine http://127.0.0.1:8120 --model "$SHAPED"
  run sync-2b-ipc-256mb bench/weight-sync.py --engine http://127.0.0.1:8120 --model "$SHAPED" --bucket-mb 256
  run sync-2b-disk bench/weight-sync.py --engine http://127.0.0.1:8120 --model "$SHAPED" --transport disk --rounds 2
  run r3-updates bench/moe-routing-replay.py --engine http://127.0.0.1:8170 --model "$MOE" --device cuda --compute-dtype bfloat16 --steps 4
  run r3-router bench/moe-routing-replay.py --engine http://127.0.0.1:8170 --model "$MOE" --device cuda --compute-dtype bfloat16 --steps 4 --drift router --noise 0.05
  return $rc
}

train() {
  need_models || return 1
  for name in t w m; do bin/tempo-rl --set "state_dir=$STATE/$name" engine stop >/dev/null 2>&1; done
  # shellcheck disable=SC2046
  TEMPO_RL_LOG_LEVEL=warn timeout 1500 bin/tempo-rl --set "state_dir=$STATE/p" $(product_sets) train "$PRODUCT_CONFIG" --run-id gpu-check --json \
    > "$OUT/train.json" 2> "$OUT/train.log"
  local rc=$?
  cp "$STATE/p/runs/gpu-check/metrics.jsonl" "$OUT/train-metrics.jsonl" 2>/dev/null
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv >> "$OUT/train.log" 2>&1
  return $rc
}

stop() {
  for name in p t w m; do bin/tempo-rl --set "state_dir=$STATE/$name" engine stop >/dev/null 2>&1; done
  return 0
}

failed=()
for phase in "${PHASES[@]}"; do
  say "$phase: started"
  t0=$(date +%s)
  if "$phase"; then
    say "$phase: ok ($(($(date +%s) - t0)) s)"
  else
    say "$phase: FAILED ($(($(date +%s) - t0)) s)"
    failed+=("$phase")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  say "failed: ${failed[*]} (logs in $OUT)"
  exit 1
fi
say "every phase ok"

