#!/usr/bin/env bash
# The tree speaks of itself only: no work sessions ("session 12"), no tracker items ("issue 13", "the
# issue asks"), no people, tools or machines of the team that wrote it, and no files outside the
# repository (a DESIGN.md it does not hold, ../shared/...). Public prior art is cited by link
# (`vime PR #120`, `verl issue #1234`: the `#` keeps those out of the issue pattern).
#
#   bash scripts/check-words.sh [PATHSPEC...]   # default: every file git knows of (tracked, or new and not ignored)
#
# Prints FILE:LINE: TEXT for each hit and exits 1 if there is any, 0 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

# One Perl-compatible pattern per rule, matched case-insensitively.
rules=(
  '\bsessions? [0-9]'                                    # "session 16", "sessions 12 and 13"
  '\b(this|that|next|last|previous|earlier) session\b'
  '\bissues? [0-9]'                                      # "issue 14" (a public one is "repo issue #N" with a link)
  "\\bthe issues?\\b|\\bissue's\\b"                      # "the issue asks", "the issue's goal"
  '\bworkplace\b|\blent\b|\b(gpu|device) machine\b'      # machines lent to the team
  '\bengineers?\b|\bsub-?agents?\b|\breview mend\b'
  '\bDESIGN\.md\b'                                       # a design file the repo does not hold
  '\.\./shared/(?!data/geo3k)'                           # outside the clone (the Geo3K data folder default excepted)
)
pattern=$(IFS='|'; echo "${rules[*]}")

# This file names the words it looks for; lock files are other projects' text.
skip='^(scripts/check-words\.sh|package-lock\.json|uv\.lock)$'

files=()
while IFS= read -r -d '' f; do
  [[ -f "$f" && ! "$f" =~ $skip ]] && files+=("$f")
done < <(git ls-files -z --cached --others --exclude-standard -- "${@:-.}")

[ ${#files[@]} -gt 0 ] || { echo "check-words: no files to check"; exit 0; }

# grep exits 1 when nothing matches; that is the good case.
hits=$(printf '%s\0' "${files[@]}" | xargs -0 grep -nHIiP -e "$pattern" -- | cut -c1-240 || true)
if [ -n "$hits" ]; then
  echo "$hits" | sed -E 's/^([^:]+:[0-9]+):/\1: /'
  echo "check-words: $(echo "$hits" | wc -l) line(s) refer to sessions, issues, the team's tools or machines, or files outside the repo" >&2
  exit 1
fi
echo "check-words: clean (${#files[@]} files)"
