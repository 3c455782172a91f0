#!/usr/bin/env bash
# Sets up an offline pack (`tempo-rl pack offline`) on a host without network:
#   tar -xf PACK -C DIR && DIR/tempo-rl/scripts/offline-install.sh
# It installs the pack's wheels beside the host's own python3 (which brings torch), never over it, and
# writes DIR/env.sh; once that is sourced, bin/tempo-rl runs on the packed Node and temporal binary,
# and bootstrap (TEMPO_RL_OFFLINE=1) installs nothing. Run again, it redoes the same.
# TEMPO_RL_HOST_PYTHON: the host's Python (default: python3 on PATH).
# Checked first, in words sh reads too: under sh (dash) the next line is an error in dash's words.
[ -n "${BASH_VERSION:-}" ] || { echo "offline-install.sh: run it with bash (bash DIR/tempo-rl/scripts/offline-install.sh, or as the executable it is), not sh" >&2; exit 2; }
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROOT="$DIR/tempo-rl"
fail() { echo "offline-install: $*" >&2; exit 1; }
q() { printf %q "$1"; }  # a path, quoted for the scripts written below

[ -f "$DIR/offline-pack.json" ] || fail "$DIR is not an unpacked offline pack (no offline-pack.json)"
"$DIR/node/bin/node" --version >/dev/null 2>&1 || fail "the packed Node ($DIR/node/bin/node) does not run on this host"
[ -x "$DIR/venv/bin/temporal" ] || fail "the pack lacks the temporal binary ($DIR/venv/bin/temporal)"
PY="$(command -v "${TEMPO_RL_HOST_PYTHON:-python3}")" || fail "no ${TEMPO_RL_HOST_PYTHON:-python3} on PATH: set TEMPO_RL_HOST_PYTHON to the host's Python"

# The wheels are built for one CPython version; another would refuse them (or worse, half load them).
want="$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("pythonVersion") or "")' "$DIR/offline-pack.json")"
have="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[ -z "$want" ] || [ "$want" = "$have" ] || fail "the pack's wheels are for Python $want, but $PY is Python $have (pack again with --python-version $have)"
# ...and for a glibc level: a host with an older one cannot load them (pack again with its --glibc).
glibc_problem="$("$PY" - "$DIR/offline-pack.json" <<'PY'
import json, platform, sys
pack = json.load(open(sys.argv[1]))
want = pack.get("glibcNeeded") or pack.get("glibc")  # what its wheels and Node need; older packs: what they were built for
name, have = platform.libc_ver()
if want and name == "glibc" and tuple(map(int, have.split("."))) < tuple(map(int, want.split("."))):
    print(f"the pack's wheels need glibc {want} or later, and this host has {have} (pack again with --glibc {have})")
PY
)"
[ -z "$glibc_problem" ] || fail "$glibc_problem"

# --target, not the host's site-packages: nothing the host has is replaced, and removing DIR undoes it all.
rm -rf "$DIR/python-site"
mkdir -p "$DIR/python-site" "$DIR/bin"
shopt -s nullglob
wheels=("$DIR"/wheels/*.whl)
if [ "${#wheels[@]}" -gt 0 ]; then
  echo "offline-install: installing ${#wheels[@]} wheels into $DIR/python-site" >&2
  PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --target "$DIR/python-site" "${wheels[@]}" >&2
fi

# The host's Python with the pack's packages first; exported, so the processes it starts
# (torchrun's workers, vLLM's engine core) find them too.
cat > "$DIR/bin/python" <<EOF
#!/usr/bin/env bash
export PYTHONPATH=$(q "$DIR/python-site")\${PYTHONPATH:+:\$PYTHONPATH}
exec $(q "$PY") "\$@"
EOF
chmod +x "$DIR/bin/python"

# TEMPO_RL_VENV: bin/python is the wrapper, bin/temporal the packed binary; the stamp is bootstrap's
# (scripts/bootstrap.sh: uv.lock then pyproject.toml, sha256, 16 digits), so it counts as installed.
ln -sfn ../../bin/python "$DIR/venv/bin/python"
cat "$ROOT/uv.lock" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16 > "$DIR/venv/.tempo-rl-stamp"

cat > "$DIR/env.sh" <<EOF
# Written by tempo-rl's scripts/offline-install.sh: source it, then run tempo-rl (bin/tempo-rl).
export PATH=$(q "$DIR/node/bin"):$(q "$ROOT/bin"):"\$PATH"
export TEMPO_RL_OFFLINE=1
export TEMPO_RL_PYTHON=$(q "$DIR/bin/python")
export TEMPO_RL_VENV=$(q "$DIR/venv")
export TEMPO_RL_TEMPORAL_BIN=$(q "$DIR/venv/bin/temporal")
EOF
echo "tempo-rl is set up in $DIR: run 'source $DIR/env.sh', then tempo-rl --help"
