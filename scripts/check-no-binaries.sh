#!/usr/bin/env bash
# Fails if git tracks a built executable: ELF (Linux), Mach-O (macOS) or PE
# (Windows), told apart by their first bytes, whatever the file is named.
# Built tools belong in bin/ (ignored), not in the repository. `make lint` runs it.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

found=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue # deleted in the working tree, or a submodule
  magic=$(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n')
  case $magic in
    7f454c46) kind=ELF ;;
    feedface | feedfacf | cefaedfe | cffaedfe | cafebabe) kind=Mach-O ;;
    4d5a*) kind=PE ;;
    *) continue ;;
  esac
  echo "tracked binary ($kind): $f — git rm --cached it and build into bin/ instead"
  found=1
done < <(git ls-files -z)
exit "$found"
