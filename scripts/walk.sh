#!/usr/bin/env bash
# walk.sh: follow one chat completion through the gateway and count its walk
# through the house (docs/architecture.md, "The request's walk, measured").
#
# It records a `dlv trace` of every call into the module's own packages while
# gateway/httpapi's TestChatCompletionReturnsTheOpenAIShape serves one request
# (production_app's handler, the tenant gate, the router, a simulated provider)
# and gives it to cmd/walkcount: stays, rooms, and returns to a room already
# left. Delve is a tool pinned in go.mod (go tool dlv).
#
#   scripts/walk.sh [-v]     -v also prints the stays in order
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  -v|"") ;;
  *) echo "walk.sh: unknown argument $1 (try -h)" >&2; exit 2 ;;
esac
out=$(mktemp -t walk.XXXXXX)
trap 'rm -f "$out"' EXIT
echo "walk: tracing one request with dlv (a breakpoint on every function of the module: about 5 minutes)…" >&2
go tool dlv trace --test ./gateway/httpapi 'gateway-lab/(gateway|solutions)/' \
  -- -test.run '^TestChatCompletionReturnsTheOpenAIShape$' -test.count=1 > "$out" 2>&1 || {
  echo "walk: dlv trace failed; its output:" >&2; tail -20 "$out" >&2; exit 1; }
go run ./cmd/walkcount ${1:-} < "$out"
