#!/usr/bin/env bash
# The GPU tier: tempo-rl's GPU tests and benches on a host with a CUDA GPU and GPU vLLM (in tempo-rl's
# Python, or brought by an offline pack: docs/deployment.md "Hosts without network"). One log per phase,
# the benches' JSON and the runs' metrics go to OUTDIR; a line per phase says how it ended.
#
#   scripts/gpu-check.sh OUTDIR [PHASE ...]
#   phases, in order: models engines tests bench price rollout train certify trainer stop
#
# OUTDIR (made if missing; a relative one is relative to where the script is started) and the phase
# names are checked before anything runs; every phase runs even if one fails, and the exit status is 1
# when one did (2 for a usage error).
#
# Engines (all on GPU 0, started at once, each with its KV cache size given: vLLM sizes it from the
# whole GPU's free memory, which engines starting beside it change); GPU_CHECK_ENGINES picks some
# (default: all):
#   p   the Qwen3-VL-2B-shaped model, colocated as configs/geo3k-multiturn-qwen3vl-2b.yaml runs it, CUDA
#       graphs where measured (engines.cuda_graphs auto): the `train` phase's own engine   port 8120
#   e   the same model eager (engines.cuda_graphs false), not colocated: the comparisons    port 8125
#   t   two of the tiny model, for the engine-layer tests                                  ports 8150-8151
#   w   the warm-started tiny policy ($TEMPO_RL_WARM_START; else the tiny model), auto      port 8160
#   we  the same, eager                                                                    port 8165
#   m   the tiny MoE, returning routed experts                                             port 8170
#   d   the tiny model as run.deterministic starts it (batch-invariant, eager)               port 8155
# Phases: tests (GPU tests against t, w, m), bench (parity on p/e/w/we, weight sync on p and w, R3 on
# m: each where its engine answers; the ipc load's parts, as a sync loads (engines.ipc_load auto: in
# place where the weights allow it) and layer-wise), price (the engine's price of run.deterministic:
# bench/engine.ts's plain loop on t's first engine against d; and whether d's logprobs stay the same one
# request at a time and 16 at once, with and without images, before and after a reload from disk:
# bench/engine-invariance.py, also at a multi-turn episode's lengths), rollout
# (bench/gpu-rollout.sh on p: the plain loop against the workflow path, the control plane at 512 in
# flight (GPU_ROLLOUT_STEPS picks steps); and the plain loop against the workflow path, single-turn at
# 64 in flight, on e), train (the 2B config on one GPU, adopting p, at each of PRODUCT_RUNS:
# "episodes:steps", default "64:3 256:5"),
# certify (run.deterministic on the GPU with the tiny model: CI's kill subset, bench/certify.ts;
# GPU_CHECK_CERTIFY_ENGINE_ARGS: its engine's vLLM flags, default '["--kv-cache-memory-bytes","2147483648"]'),
# trainer (bench/gpu-trainer.sh, no engine: run it before the engines or after stop).
# On an 80 GB card the bench's 2B parity (31 GiB for its trainer side) does not fit beside every engine:
# run bench with GPU_CHECK_ENGINES='p e', then 'w we' (it skips, saying so, where memory is short).
# Geo3K rows come from $TEMPO_RL_GEO3K_DIR (default ../shared/data/geo3k).
[ -n "${BASH_VERSION:-}" ] || { echo "scripts/gpu-check.sh: run it with bash (it is not sh)" >&2; exit 2; }
set -uo pipefail
ALL_PHASES=(models engines tests bench price rollout train certify trainer stop)
usage() {
  echo "usage: scripts/gpu-check.sh OUTDIR [PHASE ...]   (phases, in order: ${ALL_PHASES[*]})" >&2
  [ -z "${1:-}" ] || echo "gpu-check: $1" >&2
  exit 2
}
[ $# -ge 1 ] || usage
case "$1" in
  -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
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
# The phases that start a trainer worker need its Python packages (an offline pack built with
# --no-wheels carries none: the host must have them).
trainer_python() {
  "$PY" -c 'import temporalio, pydantic' 2> /dev/null && return 0
  say "the trainer's Python ($PY) lacks temporalio or pydantic: build the offline pack with the trainer's wheels (without --no-wheels) or install them"
  return 1
}

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

# The runs of the train phase: the multi-turn 2B config on one GPU (8 samples a prompt as configured),
# EPISODES a step, Geo3K rows from disk, no eval. Its engine is p.
PRODUCT_CONFIG=configs/geo3k-multiturn-qwen3vl-2b.yaml
product_sets() {  # EPISODES STEPS
  echo --set "model.path=$SHAPED" --set model.num_gpus=1 --set engines.count=1 \
    --set engines.base_port=8120 --set engines.gpu_memory_utilization=0.35 --set "$(kv 34359738368)" \
    --set engines.max_model_len=8192 --set rollout.max_context_len=8192 --set rollout.max_response_len=1024 \
    --set dataset.kind=geo3k_dir --set "dataset.path=$GEO3K" --set "rollout.prompts_per_step=$(($1 / 8))" \
    --set rollout.n_samples_per_prompt=8 --set "rollout.concurrency=$1" --set "run.steps=$2" --set run.eval_interval=0 \
    --set grpo.micro_batch_tokens=8192
}
ENGINES=(${GPU_CHECK_ENGINES:-p e t w we m d})
wants() { [[ " ${ENGINES[*]} " == *" $1 "* ]]; }
answers() { curl -sf -o /dev/null -m 5 "http://127.0.0.1:$1/health"; }

start_engine() {  # name, then global options (-c FILE, --set K=V)
  local name=$1; shift
  bin/tempo-rl --set "state_dir=$STATE/$name" "$@" engine start --json > "$OUT/engine-$name.json" 2> "$OUT/engine-$name.log"
}
engines() {
  need_models || return 1
  # Engines without a run of their own beside p: colocated, so the GPU count leaves none to the trainer.
  local ALONE=(--set model.num_gpus=1 --set model.dtype=bfloat16 --set engines.colocate=true --set engines.gpu_memory_utilization=0.05)
  # each in braces: `wants X && start_engine … &` would background the test too, and an engine not
  # wanted would leave a job that fails
  # shellcheck disable=SC2046
  wants p && { start_engine p -c "$PRODUCT_CONFIG" $(product_sets 64 1) & }
  wants e && { start_engine e "${ALONE[@]}" --set "model.path=$SHAPED" --set engines.base_port=8125 --set engines.cuda_graphs=false \
    --set engines.max_model_len=8192 --set rollout.max_context_len=8192 --set "$(kv 12884901888)" & }
  wants t && { start_engine t "${GPU[@]}" --set engines.count=2 --set engines.base_port=8150 --set "$(kv 2147483648)" & }
  wants w && { start_engine w "${GPU[@]}" --set "model.path=$WARM" --set engines.base_port=8160 --set "$(kv 2147483648)" & }
  wants we && { start_engine we "${ALONE[@]}" --set "model.path=$WARM" --set engines.base_port=8165 --set engines.cuda_graphs=false \
    --set "$(kv 2147483648)" & }
  wants m && { start_engine m "${GPU[@]}" --set "model.path=$MOE" --set rollout.routing_replay=true --set engines.base_port=8170 \
    --set engines.max_model_len=1024 --set rollout.max_context_len=1024 --set rollout.max_response_len=256 --set "$(kv 2147483648)" & }
  wants d && { start_engine d "${GPU[@]}" --set run.deterministic=true --set engines.base_port=8155 --set "$(kv 2147483648)" & }
  local failed=0
  for job in $(jobs -p); do wait "$job" || failed=1; done
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv > "$OUT/engines-memory.csv" 2>&1
  grep -h "tempo-rl engine:" "$STATE"/*/engines/engine-*.log > "$OUT/engines-execution.txt" 2>/dev/null
  return $failed
}

tests() {
  need_models || return 1
  trainer_python || return 1
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
  # name, port, model, GiB the trainer side needs free beside the engines (the 2B shape peaked at 30.5)
  parity() {
    local free
    free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 2> /dev/null | head -1)
    if [ -n "$free" ] && [ "$free" -lt $(($4 * 1024)) ]; then
      say "bench parity-$1 skipped: $((free / 1024)) GiB free beside the engines, it needs $4 (start fewer: GPU_CHECK_ENGINES)"
      rc=1
      return
    fi
    run "parity-$1" bench/logprob-parity.py --engine "http://127.0.0.1:$2" --model "$3" --data "$GEO3K" --device cuda --compute-dtype bfloat16
  }
  # parity first: the weight-sync bench leaves perturbed weights on the engines it syncs
  answers 8120 && parity 2b-graphs 8120 "$SHAPED" 32
  answers 8125 && parity 2b-eager 8125 "$SHAPED" 32
  answers 8160 && parity tiny-graphs 8160 "$WARM" 2
  answers 8165 && parity tiny-eager 8165 "$WARM" 2
  if answers 8120; then
    local lw=(--load-mode layerwise)
    run sync-2b-ipc-awake-layerwise bench/weight-sync.py --engine http://127.0.0.1:8120 --model "$SHAPED" "${lw[@]}"
    run sync-2b-ipc-layerwise bench/weight-sync.py --engine http://127.0.0.1:8120 --model "$SHAPED" --sleep-level 2 "${lw[@]}"
    run sync-2b-ipc-awake-4gb-layerwise bench/weight-sync.py --engine http://127.0.0.1:8120 --model "$SHAPED" --bucket-mb 4096 "${lw[@]}"
    run sync-2b-ipc-awake bench/weight-sync.py --engine http://127.0.0.1:8120 --model "$SHAPED"
    run sync-2b-ipc bench/weight-sync.py --engine http://127.0.0.1:8120 --model "$SHAPED" --sleep-level 2
  fi
  answers 8160 && run sync-tiny-ipc bench/weight-sync.py --engine http://127.0.0.1:8160 --model "$WARM" --sleep-level 2
  if answers 8170; then
    run r3-updates bench/moe-routing-replay.py --engine http://127.0.0.1:8170 --model "$MOE" --device cuda --compute-dtype bfloat16 --steps 4
    run r3-router bench/moe-routing-replay.py --engine http://127.0.0.1:8170 --model "$MOE" --device cuda --compute-dtype bfloat16 --steps 4 --drift router --noise 0.05
  fi
  return $rc
}

price() {
  local rc=0 name port
  for name in usual:8150 deterministic:8155; do
    port=${name#*:} name=${name%%:*}
    answers "$port" || { say "price: the $name engine ($port) does not answer"; rc=1; continue; }
    timeout 300 node --import tsx bench/engine.ts --urls "http://127.0.0.1:$port" --part 1 --concurrency 64 \
      --requests 256 --max-tokens 128 --json > "$OUT/price-$name.json" 2> "$OUT/price-$name.log" || rc=1
  done
  # what run.deterministic buys: d's answers one request at a time and 16 at once, with and without
  # images; then the same after a sync from disk (the certification's runs reload their weights each step)
  if answers 8155; then
    timeout 300 "$PY" bench/engine-invariance.py --engine http://127.0.0.1:8155 --json \
      > "$OUT/invariance-deterministic.json" 2> "$OUT/invariance-deterministic.log" || rc=1
    need_models && timeout 400 "$PY" bench/engine-invariance.py --engine http://127.0.0.1:8155 --reload "$TINY" --json \
      > "$OUT/invariance-deterministic-reloaded.json" 2> "$OUT/invariance-deterministic-reloaded.log" || rc=1
    # at a multi-turn episode's lengths: prompts of ~2,600 tokens, 160-token answers
    timeout 300 "$PY" bench/engine-invariance.py --engine http://127.0.0.1:8155 --prompts 8 --max-tokens 160 \
      --context-words 900 --kinds text,image --json > "$OUT/invariance-deterministic-long.json" \
      2> "$OUT/invariance-deterministic-long.log" || rc=1
    cat "$OUT"/invariance-deterministic{,-reloaded,-long}.log >&2
  fi
  return $rc
}

rollout() {
  local rc=0
  if answers 8125; then  # the eager engine first: the graphs engine's runs below end with the control plane's
    timeout 300 node --import tsx bench/rollout-path.ts --url http://127.0.0.1:8125 --concurrency 64 --turns 1 \
      --max-response-len 1024 --out "$OUT/rollout-eager-64.json" > "$OUT/rollout-eager-64.log" 2>&1 || rc=1
    grep -E 'workflow ÷ plain' "$OUT/rollout-eager-64.log" >&2
  fi
  answers 8120 || { say "rollout: engine p (8120) does not answer"; return 1; }
  bash bench/gpu-rollout.sh "$OUT/rollout" http://127.0.0.1:8120 || rc=1
  return $rc
}

train() {
  need_models || return 1
  trainer_python || return 1
  for name in e t w we m d; do bin/tempo-rl --set "state_dir=$STATE/$name" engine stop >/dev/null 2>&1; done
  local rc=0 run episodes steps
  for run in ${PRODUCT_RUNS:-64:3 256:5}; do
    episodes=${run%%:*} steps=${run##*:}
    # shellcheck disable=SC2046
    TEMPO_RL_LOG_LEVEL=warn timeout 1500 bin/tempo-rl --set "state_dir=$STATE/p" $(product_sets "$episodes" "$steps") \
      train "$PRODUCT_CONFIG" --run-id "gpu-check-$episodes" --json > "$OUT/train-$episodes.json" 2> "$OUT/train-$episodes.log" || rc=1
    cp "$STATE/p/runs/gpu-check-$episodes/metrics.jsonl" "$OUT/train-$episodes-metrics.jsonl" 2>/dev/null
    grep -E "^step [0-9]+ took" "$OUT/train-$episodes.log" >&2
  done
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv >> "$OUT/train.log" 2>&1
  return $rc
}

certify() {
  trainer_python || return 1
  # its own deterministic engine (vLLM's batch-invariant mode, eager) and trainer on this GPU;
  # GPU_CHECK_CERTIFY_ENGINE_ARGS: its vLLM flags, a JSON list (engines.extra_args); by default the
  # 2 GiB of KV cache it was certified with (docs/certification.md "On a GPU")
  timeout 900 node --import tsx bench/certify.ts sync --plans ci --set model.num_gpus=1 --set model.dtype=bfloat16 --engine-set engines.colocate=true \
    --engine-set "engines.extra_args=${GPU_CHECK_CERTIFY_ENGINE_ARGS:-[\"--kv-cache-memory-bytes\",\"2147483648\"]}" \
    --set engines.gpu_memory_utilization=0.2 > "$OUT/certify.log" 2>&1
  local rc=$?
  cp bench/results/certify-"$(date +%F)"-ci.json "$OUT/" 2>/dev/null
  grep -E "^\|" "$OUT/certify.log" | tail -8 >&2
  return $rc
}

trainer() {
  bash bench/gpu-trainer.sh "$OUT/trainer" ${GPU_CHECK_TRAINER_RUNS:-}
}

stop() {
  for name in p e t w we m d; do bin/tempo-rl --set "state_dir=$STATE/$name" engine stop >/dev/null 2>&1; done
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

