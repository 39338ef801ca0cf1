#!/usr/bin/env bash
# make bench-http: production_app vs a bare httputil.ReverseProxy in front of
# the same instant upstream, with the same load tool (wrk), interleaved in one
# run. Loopback only; every process is stopped on exit.
#
#   ROUNDS=3 DURATION=5s scripts/bench-http.sh
#   BASE_REF=<git ref> scripts/bench-http.sh   # also production_app as built at that ref, in the same rounds
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
BASE_REF=${BASE_REF:-}
U=127.0.0.1:9101 P=127.0.0.1:9102 G=127.0.0.1:9103 B=127.0.0.1:9104

if ! command -v wrk >/dev/null; then
  echo "bench-http: installing wrk"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk >/dev/null
fi

mkdir -p bin
go build -o bin/benchhttp ./cmd/benchhttp
go build -o bin/production_app ./solutions/production_app
targets="direct proxy gateway"
if [ -n "$BASE_REF" ]; then
  # The baseline is built from a worktree of its own, so the checkout in
  # use is never touched; the worktree goes when the script ends.
  base_tree=$(mktemp -d)
  git worktree add -q --detach "$base_tree" "$BASE_REF"
  trap 'git worktree remove --force "$base_tree"' EXIT
  echo "bench-http: building production_app at $BASE_REF ($(git rev-parse --short "$BASE_REF")) as the baseline"
  (cd "$base_tree" && go build -o "$OLDPWD/bin/production_app-base" ./solutions/production_app)
  targets="direct proxy gateway base"
fi

# Pin the server under test to core 0 and the load and upstream to core 1,
# where there are two cores and taskset exists; say which.
SERVER="" LOAD=""
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  SERVER="taskset -c 0" LOAD="taskset -c 1"
  echo "bench-http: servers under test on CPU 0; wrk and the upstream on CPU 1"
else
  echo "bench-http: no taskset or one core: processes are not pinned"
fi

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${base_tree:-}" ]; then git worktree remove --force "$base_tree"; fi
}
trap cleanup EXIT

$LOAD bin/benchhttp upstream -addr "$U" & pids+=($!)
$SERVER bin/benchhttp proxy -addr "$P" -target "http://$U" & pids+=($!)
gateway_flags=(-log-level error -readiness-delay 0 -rate 1e9 -burst 1000000000 -max-concurrent 512
  -upstream "name=instant,url=http://$U/v1,model=instant-1")
$SERVER bin/production_app -addr "$G" "${gateway_flags[@]}" >/dev/null & pids+=($!)
addrs=("$U" "$P" "$G")
if [ -n "$BASE_REF" ]; then
  $SERVER bin/production_app-base -addr "$B" "${gateway_flags[@]}" >/dev/null & pids+=($!)
  addrs+=("$B")
fi

for addr in "${addrs[@]}"; do
  for _ in $(seq 1 100); do curl -fsS -o /dev/null -X POST "http://$addr/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"auto","messages":[{"role":"user","content":"hi"}]}' 2>/dev/null && break; sleep 0.1; done
done

lua=$(mktemp)
cat >"$lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"auto","messages":[{"role":"user","content":"hi"}]}'
wrk.headers["Content-Type"] = "application/json"
LUA

# to_us converts wrk's "123.45us" / "1.23ms" / "1.2s" to microseconds.
to_us() { awk -v v="$1" 'BEGIN { n=v+0; if (v ~ /us$/) print n; else if (v ~ /ms$/) print n*1000; else if (v ~ /s$/) print n*1000000; else print n }'; }

declare -A p50 p99 rps
for round in $(seq 1 "$ROUNDS"); do
  for target in $targets; do
    case $target in direct) addr=$U ;; proxy) addr=$P ;; gateway) addr=$G ;; base) addr=$B ;; esac
    out=$($LOAD wrk -t1 -c1 -d"$DURATION" --latency -s "$lua" "http://$addr/v1/chat/completions")
    p50[$target]+="$(to_us "$(awk '$1=="50%"{print $2}' <<<"$out")") "
    p99[$target]+="$(to_us "$(awk '$1=="99%"{print $2}' <<<"$out")") "
    out=$($LOAD wrk -t1 -c32 -d"$DURATION" -s "$lua" "http://$addr/v1/chat/completions")
    rps[$target]+="$(awk '/Requests\/sec/{print $2}' <<<"$out") "
    echo "bench-http: round $round/$ROUNDS $target done"
  done
done
rm -f "$lua"

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

ttfb_proxy=$($LOAD bin/benchhttp ttfb -url "http://$P/v1/chat/completions" -n 300)
ttfb_gw=$($LOAD bin/benchhttp ttfb -url "http://$G/v1/chat/completions" -n 300)
ttfb_direct=$($LOAD bin/benchhttp ttfb -url "http://$U/v1/chat/completions" -n 300)

d50=$(median "${p50[direct]}") x50=$(median "${p50[proxy]}") g50=$(median "${p50[gateway]}")
d99=$(median "${p99[direct]}") x99=$(median "${p99[proxy]}") g99=$(median "${p99[gateway]}")
drps=$(median "${rps[direct]}") xrps=$(median "${rps[proxy]}") grps=$(median "${rps[gateway]}")

awk -v d50="$d50" -v x50="$x50" -v g50="$g50" -v d99="$d99" -v x99="$x99" -v g99="$g99" \
    -v drps="$drps" -v xrps="$xrps" -v grps="$grps" \
    -v td="${ttfb_direct% *}" -v tx="${ttfb_proxy% *}" -v tg="${ttfb_gw% *}" -v rounds="$ROUNDS" -v dur="$DURATION" 'BEGIN {
  printf "\nbench-http: medians of %d interleaved rounds of %s each (wrk; loopback)\n\n", rounds, dur
  printf "| measure | direct upstream | bare ReverseProxy | production_app | gateway / proxy |\n"
  printf "| --- | ---: | ---: | ---: | ---: |\n"
  printf "| p50 latency, c=1 | %.0f µs | %.0f µs | %.0f µs | |\n", d50, x50, g50
  printf "| p99 latency, c=1 | %.0f µs | %.0f µs | %.0f µs | |\n", d99, x99, g99
  printf "| added p50 over direct | | %.0f µs | %.0f µs | %.2f× |\n", x50-d50, g50-d50, (g50-d50)/(x50-d50)
  printf "| throughput, c=32 | %.0f req/s | %.0f req/s | %.0f req/s | %.2f× |\n", drps, xrps, grps, grps/xrps
  printf "| time to first streamed byte (p50) | %.3f ms | %.3f ms | %.3f ms | |\n", td, tx, tg
  printf "| added time to first byte over the proxy | | | %.3f ms | |\n", tg-tx
}'
if [ -n "$BASE_REF" ]; then
  b50=$(median "${p50[base]}") b99=$(median "${p99[base]}") brps=$(median "${rps[base]}")
  ttfb_base=$($LOAD bin/benchhttp ttfb -url "http://$B/v1/chat/completions" -n 300)
  awk -v ref="$BASE_REF" -v d50="$d50" -v g50="$g50" -v b50="$b50" -v g99="$g99" -v b99="$b99" -v grps="$grps" -v brps="$brps" \
      -v tg="${ttfb_gw% *}" -v tb="${ttfb_base% *}" 'BEGIN {
    printf "\nproduction_app now vs at %s, in the same rounds:\n\n", ref
    printf "| measure | at %s | now | now / then |\n", ref
    printf "| --- | ---: | ---: | ---: |\n"
    printf "| p50 latency, c=1 | %.0f µs | %.0f µs | %.2f× |\n", b50, g50, g50/b50
    printf "| added p50 over direct | %.0f µs | %.0f µs | %.2f× |\n", b50-d50, g50-d50, (g50-d50)/(b50-d50)
    printf "| p99 latency, c=1 | %.0f µs | %.0f µs | %.2f× |\n", b99, g99, g99/b99
    printf "| throughput, c=32 | %.0f req/s | %.0f req/s | %.2f× |\n", brps, grps, grps/brps
    printf "| time to first streamed byte (p50) | %.3f ms | %.3f ms | %.2f× |\n", tb, tg, tg/tb
  }'
fi
