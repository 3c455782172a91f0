# Booleans in the environment, read by one rule in bash and TypeScript (config/errors.ts parseBoolVar):
# 1, true, yes, on and 0, false, no, off, in any case and padded or not; unset or empty is false;
# anything else is refused, naming the variable and its value. Sourced by scripts/bootstrap.sh and
# scripts/lint.sh.
#
#   env_bool NAME    exit status 0 (true), 1 (false), or 2 with a message on stderr
env_bool() {
  local raw="${!1:-}" v
  v="${raw#"${raw%%[![:space:]]*}"}"
  v="${v%"${v##*[![:space:]]}"}"
  case "${v,,}" in
    1 | true | yes | on) return 0 ;;
    '' | 0 | false | no | off) return 1 ;;
    *)
      echo "$1=\"$raw\": expected 1, true, yes or on, or 0, false, no, off or empty" >&2
      return 2
      ;;
  esac
}
