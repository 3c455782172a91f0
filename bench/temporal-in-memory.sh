#!/usr/bin/env bash
# The temporal binary with `server start-dev`'s --db-filename dropped: the embedded dev server keeps its
# SQLite database in memory. For benches only (nothing survives the server), to tell whether the file
# sets a measurement's pace:
#
#   TEMPORAL_BIN_REAL="$TEMPO_RL_TEMPORAL_BIN" TEMPO_RL_TEMPORAL_BIN=$PWD/bench/temporal-in-memory.sh node --import tsx bench/overhead.ts …
#
# (bench/gpu-rollout.sh's cp-512-memory step). Any other command goes to the binary as it is.
set -u
real=${TEMPORAL_BIN_REAL:?TEMPORAL_BIN_REAL: the temporal binary this wraps}
args=()
while [ $# -gt 0 ]; do
  if [ "$1" = --db-filename ]; then
    shift 2
    continue
  fi
  args+=("$1")
  shift
done
exec "$real" "${args[@]}"
