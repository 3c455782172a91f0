#!/usr/bin/env bash
# Style and house checks, run by the test command before the tests (and alone: `bash scripts/lint.sh`).
#   Biome (TypeScript: formatter + linter, biome.json), Ruff (Python: formatter + linter, ruff.toml,
#   run as a uv tool at a pinned version, cached), import-linter (the Python packages' layers,
#   .importlinter; a uv tool too) and scripts/check-words.sh (the tree speaks of itself).
# --fix applies the formatters and the safe lint fixes instead of checking.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -n "${TEMPO_RL_UV:-}" ] || { source scripts/bootstrap.sh || exit 1; }
RUFF_VERSION=0.15.1
ruff() { UV_CACHE_DIR="$TEMPO_RL_CACHE/uv-cache" "$TEMPO_RL_UV" tool run --quiet --from "ruff==$RUFF_VERSION" ruff "$@"; }
IMPORT_LINTER_VERSION=2.16
# Both import roots on the path (.importlinter says why), workers/environments first: its `environments`
# package, not the folder of that name under workers/. --no-cache: no cache folder in the tree, and the
# graph takes under a second to build.
lint_imports() {
  PYTHONPATH=workers/environments:workers UV_CACHE_DIR="$TEMPO_RL_CACHE/uv-cache" "$TEMPO_RL_UV" tool run --quiet \
    --from "import-linter==$IMPORT_LINTER_VERSION" lint-imports --no-cache --no-logo "$@"
}
status=0
if [ "${1:-}" = --fix ]; then
  npx biome check --write . || status=1
  ruff format . && ruff check --fix . || status=1
  exit $status
fi
echo "== lint: biome (TypeScript)"
npx biome ci --colors=off . || status=1
echo "== lint: ruff (Python)"
# shellcheck source=scripts/env-bool.sh
source scripts/env-bool.sh
offline=0
env_bool TEMPO_RL_OFFLINE && offline=1 || [ $? -eq 1 ] || exit 2
if [ "$offline" = 1 ]; then
  echo "ruff: skipped (TEMPO_RL_OFFLINE=$TEMPO_RL_OFFLINE: a uv tool is not installed offline)"
else
  ruff format --check . || status=1
  ruff check . || status=1
fi
echo "== lint: import-linter (Python layers)"
if [ "$offline" = 1 ]; then
  echo "import-linter: skipped (TEMPO_RL_OFFLINE=$TEMPO_RL_OFFLINE: a uv tool is not installed offline)"
else
  lint_imports || status=1
fi
echo "== lint: the tree speaks of itself"
bash scripts/check-words.sh || status=1
exit $status
