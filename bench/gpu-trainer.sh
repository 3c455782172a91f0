#!/usr/bin/env bash
# The trainer on one GPU at the Qwen3-VL-2B shape: memory, speed (MFU) and checkpoints, in one go, the
# runs that answer most first: main, parity, base64 and pressure take about 5 minutes on an H100, all
# of them 7-8 (about 35 s each after those). Each run's
# JSON is rewritten after every step, so a run cut short keeps what it measured. No network, no Node,
# no vLLM: python3 with torch and transformers, and the trainer's own needs (pydantic and its parts,
# pillow). The model is built in memory from the shape's config (random weights, the sizes of
# generators/shaped_model.py).
#
#   bench/gpu-trainer.sh OUTDIR [RUN ...]   runs, in order: main parity base64 pressure visionfull mb16k eager
#                                           syncs autograd determ visionmodel visionmb [steady]
#
#   main        256 samples a step for 3 steps, then 512 (AdamW's state there from step 1 on): the peak
#               memory per step against the sample count, steady-state tokens/s and MFU with each
#               phase's share, step 1's full checkpoint in the background and the last one in the step
#   parity      bench/logprob-parity.py's trainer side on 32 Geo3K-like samples (no engine): its memory
#   base64      64 samples, 2 steps, as the trainer runs: the baseline of the runs below
#   pressure    the same beside 24 GiB held on the GPU (an engine's share), the default allocator
#   visionfull  the same, every vision activation kept (no recompute in the backward)
#   visionmodel the same, the vision tower's attention the model's own (image by image), not packed
#   visionmb    the same, images encoded in every micro-batch that shows them, not once per segment
#   mb16k       the same in micro-batches of 16,384 tokens (8,192 elsewhere)
#   eager       the same, decoder layers and LM head not compiled
#   syncs       the same, inputs copied to the GPU as .to() does (a host wait each)
#   autograd    the same, the LM head through log_softmax and autograd
#   determ      the same, each step as run.deterministic trains it (deterministic algorithms, seeded)
#   steady      by name only: 512 samples for 2 steps (the second is steady state), as the trainer runs,
#               again with every vision activation kept (steady-full) and with images encoded in every
#               micro-batch (steady-mb); about 5 minutes on an H100
#
# PYTHON (default python3) runs them; PEAK (default h100) names the GPU whose dense bf16 peak MFU is of.
# DRY=1: the same runs on the CPU with the tiny model ($TEMPO_RL_TINY_MODEL) and 1/64 of the samples,
# to check the script itself (tests/python/test_bench.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=$(mkdir -p "${1:?usage: bench/gpu-trainer.sh OUTDIR [RUN ...]}" && cd "$1" && pwd)
shift
RUNS=("$@")
[ ${#RUNS[@]} -gt 0 ] || RUNS=(main parity base64 pressure visionfull mb16k eager syncs autograd determ visionmodel visionmb)
PY=${PYTHON:-python3}
PEAK=${PEAK:-h100}
# Compiled kernels cached for the runs after the first (they compile the same layers).
export TORCHINDUCTOR_CACHE_DIR=$OUT/inductor-cache TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1
say() { echo "[gpu-trainer $(date +%T)] $*" | tee -a "$OUT/summary.log" >&2; }

"$PY" - > "$OUT/environment.json" <<'EOF' || { say "python3 lacks what the trainer needs (see environment.json)"; exit 1; }
import json, platform, torch, transformers, pydantic, PIL
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
                  "pydantic": pydantic.__version__, "pillow": PIL.__version__, "cuda": torch.cuda.is_available(),
                  "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))
EOF
nvidia-smi > "$OUT/nvidia-smi-before.txt" 2>&1
df -h "$OUT" > "$OUT/disk.txt" 2>&1

MODEL=(--shape qwen3-vl-2b --device cuda)
SCALE=1
if [ "${DRY:-0}" = 1 ]; then MODEL=(--model "${TEMPO_RL_TINY_MODEL:?DRY=1 needs the tiny model}" --device cpu); SCALE=64; fi
n() { local k=$(( $1 / SCALE )); echo $(( k < 2 ? 2 : k )); }  # samples, scaled

# bench/trainer.py on the 2B shape: NAME LIMIT_S FLAGS...
trainer() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$PY" bench/trainer.py "${MODEL[@]}" --peak "$PEAK" --work "$OUT/work-$name" \
    --out "$OUT/trainer-$name.json" "$@" > /dev/null 2> "$OUT/trainer-$name.log"
  local rc=$?
  rm -rf "$OUT/work-$name"
  return $rc
}

main() {
  local schedule=(--samples-per-step "$(n 256),$(n 256),$(n 256),$(n 512)" --checkpoint background --checkpoint-interval 2)
  trainer main 330 "${schedule[@]}" --steps 4 --last-step-full --time-budget 280 && return 0
  # out of memory (exit 3; trainer-main.json says where): the same at half the micro-batch
  [ $? -eq 3 ] && trainer main-mb4096 240 "${schedule[@]}" --steps 3 --micro-batch-tokens 4096 --time-budget 180
  return 1
}
parity() {
  timeout 240 "$PY" bench/logprob-parity.py --synthetic "${MODEL[@]}" --prompts 8 --samples 4 \
    --max-tokens 64 --json > "$OUT/parity-memory.json" 2> "$OUT/parity-memory.log"
}
small() { local name=$1; shift; trainer "$name" 150 --samples "$(n 64)" --steps 2 --checkpoint none "$@"; }
base64() { small base64; }
visionfull() { small visionfull --vision-checkpoint off; }
visionmodel() { small visionmodel --vision-attention model; }
visionmb() { small visionmb --vision-once off; }
steady() {
  local two=(--samples-per-step "$(n 512)" --steps 2 --checkpoint none)
  trainer steady 200 "${two[@]}"
  trainer steady-full 200 "${two[@]}" --vision-checkpoint off
  trainer steady-mb 200 "${two[@]}" --vision-once off
}
eager() { small eager --compile off; }
mb16k() { small mb16k --micro-batch-tokens 16384; }
pressure() { small pressure --reserve-gib 24 --expandable off; }
autograd() { small autograd --lm-head autograd; }
syncs() { small syncs --pinned-copies off; }
determ() { small determ --deterministic; }

for run in "${RUNS[@]}"; do
  t0=$(date +%s)
  if "$run"; then say "$run: ok ($(( $(date +%s) - t0 )) s)"; else say "$run: FAILED or cut short ($(( $(date +%s) - t0 )) s): see its log"; fi
done
nvidia-smi > "$OUT/nvidia-smi-after.txt" 2>&1
"$PY" bench/gpu_trainer_summary.py "$OUT" | tee "$OUT/summary.txt"
