#!/usr/bin/env bash
# Regenerates the examples docs/instructor-guide.md shows from real runs:
# what `labctl export` prints for each template, grade.md and junit.xml of
# the labs template with lab 01 solved, and the count of graded commands.
# cmd/labctl's TestExported… tests compare the guide with the same runs and
# fail when it is stale; this writes what they want. About a minute.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0;; esac
cd "$(dirname "$0")/.."
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "guide-examples: exporting both templates and grading lab 01 solved…" >&2
# The guide shows these directories; the tests compare with them aside.
rm -rf /tmp/gateway-lab-labs /tmp/gateway-lab-write
go run ./cmd/labctl export /tmp/gateway-lab-labs 2>/dev/null > "$tmp/out-labs.txt"
go run ./cmd/labctl export -track write /tmp/gateway-lab-write 2>/dev/null > "$tmp/out-write.txt"
(
  cd /tmp/gateway-lab-labs
  for f in "$root"/solutions/01-concurrency/*.go; do case $f in *_test.go) ;; *) cp "$f" labs/01-concurrency/;; esac; done
  printf '\nfunc TestMineAlwaysPasses(t *testing.T) {}\n' >> labs/01-concurrency/concurrency_test.go
  go run ./cmd/labctl grade --out "$tmp/report" >/dev/null 2>&1
)
rm -rf /tmp/gateway-lab-labs /tmp/gateway-lab-write
TMP="$tmp" python3 - <<'PY'
import os, re
tmp=os.environ['TMP']
p='docs/instructor-guide.md'
s=open(p).read()
def block(marker, body):
    global s
    i=s.index(marker+'\n```')
    j=s.index('\n',i+len(marker)+1)+1   # after the opening fence line
    k=s.index('\n```',j)
    s=s[:j]+body.rstrip('\n')+s[k:]
block('<!-- output of labctl export -track labs -->', open(tmp+'/out-labs.txt').read())
block('<!-- output of labctl export -track write -->', open(tmp+'/out-write.txt').read())
gm=open(tmp+'/report/grade.md').read().split('\n')
i=s.index('<!-- grade.md of the labs template with lab 01 solved -->\n```markdown\n')+len('<!-- grade.md of the labs template with lab 01 solved -->\n```markdown\n')
k=s.index('\n\n',s.index('| 12 |',i))
s=s[:i]+'\n'.join(gm[:16])+s[k:]
jx=open(tmp+'/report/junit.xml').read().split('\n')
block('<!-- junit.xml of the labs template with lab 01 solved -->','\n'.join(jx[1:4]))
n=len(re.findall(r'"name":', open('.github/classroom/autograding.json').read()))
s=re.sub(r'\(the first of its \d+ entries\.\)', f'(the first of its {n} entries.)', s)
s=re.sub(r'so the total \(\d+\) is', f'so the total ({n}) is', s)
s=re.sub(r'so \d+ commands take', f'so {n} commands take', s)
open(p,'w').write(s)
PY
echo "guide-examples: docs/instructor-guide.md rewritten; git diff shows what changed" >&2
