#!/usr/bin/env bash
# The test suite: set-up (idempotent, cached), lint (scripts/lint.sh), typecheck, node:test (TS),
# pytest (Python), in tiers.
#   bash scripts/test.sh          the fast tier (the README's command; CI's): every test but the long tier;
#                                 pytest beside node (one thread, no shared engines; two files after node)
#   bash scripts/test.sh --unit   the unit tier, part of the fast tier: what tests/unit.txt lists (tests that
#                                 start no engine, server, browser or child process), node and pytest side
#                                 by side; lint, no typecheck, no engines, no chromium; 75-88 s on 2 busy cores
#   bash scripts/test.sh --long   the long tier only: tests/long.txt lists it (the demo's learning
#                                 threshold, the random chaos trials, separate hosts, slower duplicates)
#   bash scripts/test.sh --all    the fast and long tiers
# TEMPO_RL_TEST_TIER=fast|unit|long|all chooses the same way (a flag, --fast too, wins). TEMPO_RL_TEST_FILES
# (TS files) and TEMPO_RL_PYTEST_ARGS (pytest's options; default -q -rs) narrow or change a run.
# It starts what the tests need (engines for the suite; each test file starts its own Temporal server
# on free ports) and stops it at the end. Each file's duration goes to durations.json in the suite's
# state dir, the slowest are printed at the end; TEMPO_RL_SUITE_RECORD=FILE (e.g.
# bench/results/suite-durations.json) keeps a copy. The last line sums both runners.
set -uo pipefail
cd "$(dirname "$0")/.."

tier="${TEMPO_RL_TEST_TIER:-fast}"
for arg in "$@"; do
  case "$arg" in
    --fast | --unit | --long | --all) tier="${arg#--}" ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scripts/test.sh: unknown argument \"$arg\" (--unit, --long, --all or none)" >&2; exit 2 ;;
  esac
done
case "$tier" in
  fast | unit | long | all) ;;
  *) echo "scripts/test.sh: TEMPO_RL_TEST_TIER=\"$tier\" is not fast, unit, long or all" >&2; exit 2 ;;
esac

# A list's entries (tests/long.txt, tests/unit.txt): TS files (a folder: its *.test.ts), Python files
# and test ids, into the arrays named by $2 (TS) and $3 (Python).
read_list() {
  local -n list_ts=$2 list_py=$3
  local line entry f
  while IFS= read -r line || [ -n "$line" ]; do
    entry="${line%%#*}"
    entry="${entry//[[:space:]]/}" # paths have no spaces
    [ -n "$entry" ] || continue
    if [ ! -e "${entry%%::*}" ]; then
      echo "$1: \"$entry\" does not exist (moved? update the list)" >&2; exit 2
    fi
    case "$entry" in
      */) for f in "$entry"*.test.ts; do [ -e "$f" ] && list_ts+=("$f"); done ;;
      *.ts) list_ts+=("$entry") ;;
      *.py | *.py::*) list_py+=("$entry") ;;
      *) echo "$1: \"$entry\" is not a TS test file, a folder of them, or a Python test" >&2; exit 2 ;;
    esac
  done < "$1"
}
long_ts=() long_py=() unit_ts=() unit_py=()
read_list tests/long.txt long_ts long_py
read_list tests/unit.txt unit_ts unit_py

is_long() { local f; for f in "${long_ts[@]}"; do [ "$f" = "$1" ] && return 0; done; return 1; }
fast_ts=()
for f in tests/ts/*.test.ts; do is_long "$f" || fast_ts+=("$f"); done
py_args=()
case "$tier" in
  fast)
    ts_files=("${fast_ts[@]}")
    py_args=(tests/python)
    for e in "${long_py[@]}"; do
      case "$e" in *::*) py_args+=("--deselect=$e") ;; *) py_args+=("--ignore=$e") ;; esac
    done ;;
  unit) ts_files=("${unit_ts[@]}"); [ ${#unit_py[@]} -eq 0 ] || py_args=("${unit_py[@]}") ;;
  long) ts_files=("${long_ts[@]}"); [ ${#long_py[@]} -eq 0 ] || py_args=("${long_py[@]}") ;;
  all) ts_files=("${fast_ts[@]}" "${long_ts[@]}"); py_args=(tests/python) ;;
esac
# shellcheck disable=SC2206 # a list of paths, split on spaces like the default
[ -z "${TEMPO_RL_TEST_FILES:-}" ] || ts_files=(${TEMPO_RL_TEST_FILES})

source scripts/bootstrap.sh || { echo "bootstrap failed" >&2; exit 1; }
export TEMPO_RL_LOG_LEVEL="${TEMPO_RL_LOG_LEVEL:-warn}" TEMPO_RL_LOG_FORMAT=json

status=0
# The report test renders the HTML page in headless Chromium (Debian's package); the unit tier has none.
if [ "$tier" != unit ] && ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "== installing chromium for the report test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "chromium could not be installed; the screenshot test will skip" >&2
fi
bash scripts/lint.sh || status=1
# The unit tier leaves the typecheck out: 13-33 s on 2 busy cores, up to a quarter of its 2 minutes (lint: 7 s).
if [ "$tier" != unit ]; then
  echo "== typecheck"
  npx tsc --noEmit -p . || status=1
fi

suite_state="$(mktemp -d -t tempo-rl-suite-XXXXXX)"
# Every temporary directory a test makes (node's os.tmpdir(), pytest's tmp_path) lands here and goes
# with the suite, whatever the test forgot to remove.
export TMPDIR="$suite_state/tmp"
mkdir -p "$TMPDIR"
cleanup() {
  # the unit tier's pytest, beside node (a background job ignores the terminal's Ctrl-C)
  if [ -n "${py_pid:-}" ] && kill -0 "$py_pid" 2>/dev/null; then pkill -P "$py_pid"; kill "$py_pid"; fi 2>/dev/null
  if [ -n "${TEMPO_RL_TEST_ENGINE_URLS:-}" ]; then
    TEMPO_RL_STATE_DIR="$suite_state" bin/tempo-rl engine stop >/dev/null 2>&1 || true
  fi
  [ "${TEMPO_RL_KEEP_TEST_STATE:-}" = 1 ] || rm -rf "$TMPDIR"
}
trap cleanup EXIT
# The unit tier's tests start nothing, engines included.
if [ "$tier" != unit ] && [ -f cli/engine-command.ts ] && [ -z "${TEMPO_RL_TEST_ENGINE_URLS:-}" ] && [ -z "${TEMPO_RL_TEST_NO_ENGINES:-}" ]; then
  echo "== starting 2 vLLM engines for the suite (state: $suite_state)"
  if TEMPO_RL_STATE_DIR="$suite_state" bin/tempo-rl --set engines.count=2 --set engines.base_port=8150 engine start >&2; then
    export TEMPO_RL_TEST_ENGINE_URLS="http://127.0.0.1:8150,http://127.0.0.1:8151"
  else
    echo "engines did not start; tests that need them will fail" >&2
    status=1
  fi
fi

ts_out="$suite_state/node-test.out"
py_out="$suite_state/pytest.out"
py_outs=("$py_out")
run_ts() {
  [ ${#ts_files[@]} -gt 0 ] || return 0
  node --import tsx --test --test-concurrency=1 --test-force-exit \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=./scripts/suite-durations.mjs --test-reporter-destination="$suite_state/ts-files.jsonl" \
    "${ts_files[@]}" 2>&1 | tee "$ts_out"
  return "${PIPESTATUS[0]}"
}
run_py() {  # [JUNIT_XML]
  [ ${#py_args[@]} -gt 0 ] || { echo "none in this tier" | tee "$py_out"; return 0; }
  # shellcheck disable=SC2086 # options, split on spaces
  "$TEMPO_RL_PYTHON" -m pytest ${TEMPO_RL_PYTEST_ARGS:--q -rs} --junitxml="${1:-$suite_state/pytest.xml}" "${py_args[@]}" 2>&1 | tee "$py_out"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 5 ] && rc=0 # no test collected
  return "$rc"
}
echo "== TypeScript tests (node:test, $tier tier: ${#ts_files[@]} files)"
if [ "$tier" = unit ]; then
  # Side by side (unit tests start nothing that could collide): node's files run one at a time, each
  # mostly on one core, so pytest takes the other. pytest's output follows node's.
  run_py >/dev/null & py_pid=$!
  run_ts || status=1
  echo "== Python tests (pytest, $tier tier, beside node)"
  wait "$py_pid" || status=1
  cat "$py_out"
elif [ "$tier" = fast ] && [ -n "${TEMPO_RL_TEST_ENGINE_URLS:-}" ]; then
  # pytest beside node here too, on one thread (node's files take the other core), without the suite's
  # engines; the two files that sync weights into those engines run after node, as all of pytest did.
  after_py=(tests/python/test_parity.py tests/python/test_weight_ipc.py)
  py_args+=("${after_py[@]/#/--ignore=}")
  (export TEMPO_RL_TEST_ENGINE_URLS='' OMP_NUM_THREADS=1 && run_py >/dev/null) & py_pid=$!
  run_ts || status=1
  echo "== Python tests (pytest, $tier tier, beside node)"
  wait "$py_pid" || status=1
  cat "$py_out"
  echo "== Python tests on the suite's engines (pytest, after node)"
  py_args=("${after_py[@]}") py_out="$suite_state/pytest-after.out" py_outs+=("$suite_state/pytest-after.out")
  run_py "$suite_state/pytest-after.xml" || status=1
else
  run_ts || status=1
  echo "== Python tests (pytest, $tier tier)"
  run_py || status=1
fi

echo "== durations (wall: $SECONDS s)"
node scripts/suite-durations.mjs table "$suite_state/ts-files.jsonl" "$suite_state/pytest.xml" "$suite_state/durations.json"
if [ -n "${TEMPO_RL_SUITE_RECORD:-}" ]; then
  mkdir -p "$(dirname "$TEMPO_RL_SUITE_RECORD")" && cp "$suite_state/durations.json" "$TEMPO_RL_SUITE_RECORD" \
    && echo "recorded in $TEMPO_RL_SUITE_RECORD"
fi

# One closing line over both runners.
count() { [ -f "$2" ] && grep -oE "$1" "$2" | tail -1 | grep -oE '[0-9]+' || echo 0; }
pycount() { local f n=0; for f in "${py_outs[@]}"; do n=$((n + $(count "$1" "$f"))); done; echo $n; }
passed=$(( $(count 'ℹ pass [0-9]+' "$ts_out") + $(pycount '[0-9]+ passed') ))
failed=$(( $(count 'ℹ fail [0-9]+' "$ts_out") + $(pycount '[0-9]+ failed') ))
skipped=$(( $(count 'ℹ skipped [0-9]+' "$ts_out") + $(pycount '[0-9]+ skipped') ))
echo "total: $passed passed, $failed failed, $skipped skipped"
exit $status
