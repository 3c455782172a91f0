#!/usr/bin/env bash
# The whole test suite: set-up (idempotent, cached), typecheck, node:test (TS), pytest (Python).
# It starts what the tests need (engines for the suite; each test file starts its own Temporal
# server on free ports) and stops it at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/bootstrap.sh || { echo "bootstrap failed" >&2; exit 1; }
export TEMPO_RL_LOG_LEVEL="${TEMPO_RL_LOG_LEVEL:-warn}" TEMPO_RL_LOG_FORMAT=json

status=0
# The report test renders the HTML page in headless Chromium (Debian's package).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "== installing chromium for the report test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "chromium could not be installed; the screenshot test will skip" >&2
fi
echo "== typecheck"
npx tsc --noEmit -p . || status=1

suite_state="$(mktemp -d -t tempo-rl-suite-XXXXXX)"
# Every temporary directory a test makes (node's os.tmpdir(), pytest's tmp_path) lands here and goes
# with the suite, whatever the test forgot to remove.
export TMPDIR="$suite_state/tmp"
mkdir -p "$TMPDIR"
cleanup() {
  if [ -n "${TEMPO_RL_TEST_ENGINE_URLS:-}" ]; then
    TEMPO_RL_STATE_DIR="$suite_state" bin/tempo-rl engine stop >/dev/null 2>&1 || true
  fi
  [ "${TEMPO_RL_KEEP_TEST_STATE:-}" = 1 ] || rm -rf "$TMPDIR"
}
trap cleanup EXIT
if [ -f cli/engine-command.ts ] && [ -z "${TEMPO_RL_TEST_ENGINE_URLS:-}" ] && [ -z "${TEMPO_RL_TEST_NO_ENGINES:-}" ]; then
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
echo "== TypeScript tests (node:test)"
node --import tsx --test --test-concurrency=1 --test-force-exit --test-reporter=spec ${TEMPO_RL_TEST_FILES:-tests/ts/*.test.ts} 2>&1 | tee "$ts_out"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== Python tests (pytest)"
"$TEMPO_RL_PYTHON" -m pytest ${TEMPO_RL_PYTEST_ARGS:--q -rs} tests/python 2>&1 | tee "$py_out"
rc=${PIPESTATUS[0]}
if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then status=1; fi

# One closing line over both runners.
count() { grep -oE "$1" "$2" | tail -1 | grep -oE '[0-9]+' || echo 0; }
passed=$(( $(count 'ℹ pass [0-9]+' "$ts_out") + $(count '[0-9]+ passed' "$py_out") ))
failed=$(( $(count 'ℹ fail [0-9]+' "$ts_out") + $(count '[0-9]+ failed' "$py_out") ))
skipped=$(( $(count 'ℹ skipped [0-9]+' "$ts_out") + $(count '[0-9]+ skipped' "$py_out") ))
echo "total: $passed passed, $failed failed, $skipped skipped"
exit $status
