#!/usr/bin/env bash
# The tree describes the project as it is: it does not refer to how or by whom it was developed
# (work periods, tracker numbers, the tools and hosts of its authors) or to files outside the
# repository. Public prior art is cited by link with a `#` number, which the patterns leave alone.
#
#   bash scripts/check-words.sh [PATHSPEC...]   # default: every file git knows of (tracked, or new and not ignored)
#
# Prints FILE:LINE: TEXT for each hit and exits 1 if there is any, 0 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

# One Perl-compatible pattern per rule, matched case-insensitively.
rules=(
  '\bs[e]ssions? [0-9]'
  '\b(this|that|next|last|previous|earlier) s[e]ssion\b'
  '\bi[s]sues? [0-9]'
  "\\bthe i[s]sues?\\b|\\bi[s]sue's\\b"
  '\bw[o]rkplace\b|\bl[e]nt\b|\b(gpu|device) m[a]chine\b'
  '\be[n]gineers?\b|\bsub-?a[g]ents?\b|\br[e]view mend\b'
  '\bD[E]SIGN\.md\b'
  '\.\./s[h]ared/(?!data/geo3k)'                           # the Geo3K data folder default excepted
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
  echo "check-words: $(echo "$hits" | wc -l) line(s) refer to how the project was developed or to files outside the repository" >&2
  exit 1
fi
echo "check-words: clean (${#files[@]} files)"
