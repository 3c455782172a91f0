#!/usr/bin/env bash
# The rollout path next to a GPU engine, in one go (about 6 minutes with a CUDA-graphs engine of the
# Qwen3-VL-2B shape on one H100 and 16 cores): what a step's rollout costs through the episode
# workflows against a plain loop of the same requests, and the control plane at 512 episodes in flight.
# Node from PATH, the temporal binary from TEMPO_RL_TEMPORAL_BIN (the offline pack's environment sets
# both; scripts/bootstrap.sh with TEMPO_RL_OFFLINE=1 installs nothing). Each step writes its JSON as it
# goes (a step cut short by its time limit keeps the rows it finished) and its log to OUTDIR; a line per
# step says how it ended (OUTDIR/summary.log).
#
#   bench/gpu-rollout.sh OUTDIR URL        URL: the running engine (tempo-rl's routes, e.g. http://127.0.0.1:8120)
#
# In order (the first answers most):
#   1. path-64     bench/rollout-path.ts at 64 in flight, single-turn then 4 turns: plain loop vs the
#                  rollout workers, 1,024-token responses (goal: workflow ÷ plain ≥ 0.95)       ~1.5 min
#   2. cp-512      bench/overhead.ts part b, 1,024 two-turn episodes at 512 in flight, 1–4 s turns,
#                  the 16-core default (rollout.worker_processes auto): workflows ÷ direct (goal ≤ 1.05)
#                  and control-plane CPU per durable record (goal ≤ 5 ms)                         ~1 min
#   3. path-256    bench/rollout-path.ts at 256 in flight                                          ~2 min
#   4. cp-512-w1   step 2 with one rollout worker process (the earlier layout), for comparison    ~1 min
#   5. cp-512-w8   step 2 with eight                                                               ~1 min
#   6. cp-512-memory  step 2 with the dev server's database in memory (bench/temporal-in-memory.sh):
#                  whether the SQLite file sets the pace                                           ~1 min
#   (cp-512-cluster  step 2 against Temporal's own server with 16 history shards over SQLite
#                  (bench/temporal-cluster.sh; TEMPORAL_SERVER_BIN names the binary): whether the dev
#                  server's one shard sets the pace; cp-512-cluster-1: the same server with one shard;
#                  cp-512-cluster-pg: with 16 shards over a PostgreSQL (bench/postgres-scratch.sh: PG_BIN,
#                  TEMPORAL_SQL_TOOL_BIN, TEMPORAL_SCHEMA_DIR); cp-512-cluster-pg-w8: that with eight
#                  rollout worker processes; -s64: 64 history shards; -p8: 8 task-queue partitions
#                  (4 by default). Each keeps the server's metrics (NAME-server-metrics.txt). By name
#                  only                                                                             ~1 min each)
#   (path-256-mt   step 3's multi-turn row alone, when its single-turn row is known: by name only) ~6 min
#                 (one H100: a 76 s warm-up, 89 s for the plain side's 512 episodes, then the workflows')
#
# DRY=1: the same steps at small sizes (8 and 16 in flight, 64-token budgets; 32 in flight for the
# control plane), to check the script itself on a CPU engine (about 4 minutes on 2 cores).
set -uo pipefail
cd "$(dirname "$0")/.."
USAGE='usage: bench/gpu-rollout.sh OUTDIR URL'
OUT=$(mkdir -p "${1:?$USAGE}" && cd "$1" && pwd)
URL=${2:?$USAGE}
say() { echo "[gpu-rollout $(date +%T)] $*" | tee -a "$OUT/summary.log" >&2; }
source scripts/bootstrap.sh > "$OUT/bootstrap.log" 2>&1 || { say "bootstrap failed: $OUT/bootstrap.log"; exit 1; }
command -v node > /dev/null || { say 'node is not on PATH'; exit 1; }

{
  echo "date: $(date -Is)"
  echo "commit: $(git rev-parse HEAD 2> /dev/null || echo unknown)"
  echo "cores: $(nproc)"
  echo "node: $(node --version)"
  echo "temporal: $("${TEMPO_RL_TEMPORAL_BIN:-temporal}" --version 2>&1 | head -1)"
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv 2>&1
} > "$OUT/host.txt"

step() {  # name, time limit (s), then the bench and its flags
  local name=$1 limit=$2
  shift 2
  say "$name: node --import tsx $*"
  local t0=$SECONDS
  timeout --kill-after=30 "$limit" node --import tsx "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  say "$name: exit $rc after $((SECONDS - t0)) s$([ $rc = 124 ] && echo ' (time limit: the rows finished are in its JSON)')"
  grep -E '^ *conc [0-9]+( turns [0-9]+)?: ' "$OUT/$name.log" | tee -a "$OUT/summary.log" >&2
}
if [ "${DRY:-0}" = 1 ]; then
  SMALL=8 LARGE=16 TOKENS=(--max-response-len 64 --turn-words 15 --samples 4) CP=(--b-concurrency 32 --b-episodes 64)
else
  SMALL=64 LARGE=256 TOKENS=(--max-response-len 1024) CP=(--b-concurrency 512 --b-episodes 1024)
fi
path_run() {  # name, limit, concurrency[, turns]
  step "$1" "$2" bench/rollout-path.ts --url "$URL" --concurrency "$3" --turns "${4:-1,4}" "${TOKENS[@]}" --out "$OUT/$1.json"
}
cp_run() {  # name, limit, then --set flags
  local name=$1 limit=$2
  shift 2
  step "$name" "$limit" bench/overhead.ts --part b "${CP[@]}" --b-latency 1000-4000 --quiet-wait 0 --noisy-retries 0 \
    "$@" --out "$OUT/$name.json"
}

# GPU_ROLLOUT_STEPS: some of the steps only (e.g. "path-64 path-256" when the control plane was measured apart)
STEPS=" ${GPU_ROLLOUT_STEPS:-path-64 cp-512 path-256 cp-512-w1 cp-512-w8 cp-512-memory} "
on() { [[ "$STEPS" == *" $1 "* ]]; }
on path-64 && path_run path-64 300 "$SMALL"
on cp-512 && cp_run cp-512 120
on path-256 && path_run path-256 420 "$LARGE"
on path-256-mt && path_run path-256-mt 420 "$LARGE" 4
on cp-512-w1 && cp_run cp-512-w1 120 --set rollout.worker_processes=1
on cp-512-w8 && cp_run cp-512-w8 120 --set rollout.worker_processes=8
cluster_run() {  # name, history shards, sqlite|postgres, then more flags for the bench
  local name=$1 shards=$2 pg=$3 dir=$OUT/$1-server addr pids
  shift 3
  [ -n "${TEMPORAL_SERVER_BIN:-}" ] || { say "$name: skipped: TEMPORAL_SERVER_BIN (the temporal-server binary) is not set"; return; }
  if [ "$pg" = postgres ]; then
    [ -n "${PG_BIN:-}" ] || { say "$name: skipped: PG_BIN (PostgreSQL's binaries) is not set"; return; }
    TEMPORAL_CLUSTER_POSTGRES=$(bash bench/postgres-scratch.sh start "$dir/pg" 5433) || { say "$name: PostgreSQL did not start: $dir/pg"; return; }
  fi
  if addr=$(TEMPORAL_CLUSTER_POSTGRES=${TEMPORAL_CLUSTER_POSTGRES:-} bash bench/temporal-cluster.sh start "$dir" "$shards" 7433); then
    pids=$(cat "$dir/server.pid")$([ "$pg" = postgres ] && echo ",$(head -1 "$dir/pg/data/postmaster.pid")")
    cp_run "$name" 150 --set "temporal.address=$addr" --server-pid "$pids" "$@"
    # the server's own latencies (schedule-to-start, persistence) where the run's waits come from
    curl -sf -m 10 "http://127.0.0.1:7442/metrics" > "$OUT/$name-server-metrics.txt" || rm -f "$OUT/$name-server-metrics.txt"
    bash bench/temporal-cluster.sh stop "$dir"
  else
    say "$name: the server did not start: $dir/server.log"
  fi
  rm -f "$dir"/temporal.db*  # the episodes' histories: the JSON has what was measured
  if [ "$pg" = postgres ]; then
    bash bench/postgres-scratch.sh stop "$dir/pg"
    rm -rf "$dir/pg/data"
  fi
  TEMPORAL_CLUSTER_POSTGRES=
}
on cp-512-memory && TEMPORAL_BIN_REAL=$TEMPO_RL_TEMPORAL_BIN TEMPO_RL_TEMPORAL_BIN=$PWD/bench/temporal-in-memory.sh cp_run cp-512-memory 120
on cp-512-cluster && cluster_run cp-512-cluster 16 sqlite
on cp-512-cluster-1 && cluster_run cp-512-cluster-1 1 sqlite
on cp-512-cluster-pg && cluster_run cp-512-cluster-pg 16 postgres
on cp-512-cluster-pg-w8 && cluster_run cp-512-cluster-pg-w8 16 postgres --set rollout.worker_processes=8
on cp-512-cluster-pg-s64 && cluster_run cp-512-cluster-pg-s64 64 postgres
on cp-512-cluster-pg-p8 && TEMPORAL_CLUSTER_DYNAMIC="matching.numTaskqueueReadPartitions=8 matching.numTaskqueueWritePartitions=8" \
  cluster_run cp-512-cluster-pg-p8 16 postgres
say "done: $OUT"
