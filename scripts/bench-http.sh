#!/usr/bin/env bash
# make bench-http: production_app vs a bare httputil.ReverseProxy in front of
# the same instant upstream, with the same load tool (wrk), interleaved in one
# run. Loopback only; every process is stopped on exit.
#
#   ROUNDS=8 DURATION=2s scripts/bench-http.sh   # the defaults
#   BASE_REF=<git ref> scripts/bench-http.sh   # also production_app as built at that ref, in the same rounds
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-8}
DURATION=${DURATION:-2s}
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
# cpu_ticks prints a process's user+system CPU time in clock ticks (Linux /proc), or "" elsewhere.
cpu_ticks() { [ -r "/proc/$1/stat" ] && awk '{print $14+$15}' "/proc/$1/stat" || true; }
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)

# Each round runs every target at c=1 and then at c=32, the targets back to
# back and in the opposite order every other round, so a drift in the
# machine's speed (a shared VM's neighbours) falls on both sides of a
# comparison. The ratios are taken within each round, from runs seconds
# apart, and their median reported with their range.
declare -A p50 p99 rps cpu ttfb pid_of addr_of=([direct]=$U [proxy]=$P [gateway]=$G [base]=$B)
pid_of[proxy]=${pids[1]} pid_of[gateway]=${pids[2]}
[ -n "$BASE_REF" ] && pid_of[base]=${pids[3]}
ratio_rps="" ratio_p50="" ratio_cpu="" ttfb_diff="" ratio_base_rps="" ratio_base_p50=""
for round in $(seq 1 "$ROUNDS"); do
  order=$targets
  if [ $((round % 2)) = 0 ]; then order=$(tr ' ' '\n' <<<"$targets" | tac | tr '\n' ' '); fi
  declare -A r50=() rr=()
  for target in $order; do
    addr=${addr_of[$target]}
    out=$($LOAD wrk -t1 -c1 -d"$DURATION" --latency -s "$lua" "http://$addr/v1/chat/completions")
    r50[$target]=$(to_us "$(awk '$1=="50%"{print $2}' <<<"$out")")
    p50[$target]+="${r50[$target]} "
    p99[$target]+="$(to_us "$(awk '$1=="99%"{print $2}' <<<"$out")") "
  done
  for target in $order; do
    addr=${addr_of[$target]}
    t0=$(cpu_ticks "${pid_of[$target]:-0}")
    out=$($LOAD wrk -t1 -c32 -d"$DURATION" -s "$lua" "http://$addr/v1/chat/completions")
    t1=$(cpu_ticks "${pid_of[$target]:-0}")
    rr[$target]=$(awk '/Requests\/sec/{print $2}' <<<"$out")
    rps[$target]+="${rr[$target]} "
    if [ -n "$t0" ] && [ -n "$t1" ]; then
      cpu[$target]+="$(awk -v d=$((t1 - t0)) -v hz="$hz" -v n="$(awk '/requests in/{print $1}' <<<"$out")" 'BEGIN { printf "%.1f", d / hz * 1e6 / n }') "
    fi
  done
  for target in $order; do # time to the first streamed byte, p50 of 100 sequential streams
    addr=${addr_of[$target]}
    ttfb[$target]+="$($LOAD bin/benchhttp ttfb -url "http://$addr/v1/chat/completions" -n 100 | awk '{print $1}') "
  done
  ratio_cpu+="$(awk -v g="$(awk '{print $NF}' <<<"${cpu[gateway]:-nan}")" -v x="$(awk '{print $NF}' <<<"${cpu[proxy]:-nan}")" 'BEGIN { if (g == "nan" || x == "nan") print "nan"; else printf "%.3f", g / x }') "
  ttfb_diff+="$(awk -v g="$(awk '{print $NF}' <<<"${ttfb[gateway]}")" -v x="$(awk '{print $NF}' <<<"${ttfb[proxy]}")" 'BEGIN { printf "%.3f", g - x }') "
  ratio_rps+="$(awk -v g="${rr[gateway]}" -v x="${rr[proxy]}" 'BEGIN { printf "%.3f", g / x }') "
  ratio_p50+="$(awk -v g="${r50[gateway]}" -v x="${r50[proxy]}" -v d="${r50[direct]}" 'BEGIN { printf "%.3f", (g - d) / (x - d) }') "
  if [ -n "$BASE_REF" ]; then
    ratio_base_rps+="$(awk -v g="${rr[gateway]}" -v b="${rr[base]}" 'BEGIN { printf "%.3f", g / b }') "
    ratio_base_p50+="$(awk -v g="${r50[gateway]}" -v b="${r50[base]}" -v d="${r50[direct]}" 'BEGIN { printf "%.3f", (g - d) / (b - d) }') "
  fi
  echo "bench-http: round $round/$ROUNDS done (gateway / proxy: throughput $(awk '{print $NF}' <<<"$ratio_rps")×, added p50 $(awk '{print $NF}' <<<"$ratio_p50")×)"
done
rm -f "$lua"

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2); else print "nan"}'; }
range() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk 'NR==1{lo=$1} {hi=$1} END {printf "%.2f–%.2f", lo, hi}'; }

d50=$(median "${p50[direct]}") x50=$(median "${p50[proxy]}") g50=$(median "${p50[gateway]}")
d99=$(median "${p99[direct]}") x99=$(median "${p99[proxy]}") g99=$(median "${p99[gateway]}")
drps=$(median "${rps[direct]}") xrps=$(median "${rps[proxy]}") grps=$(median "${rps[gateway]}")

xcpu=$(median "${cpu[proxy]:-}") gcpu=$(median "${cpu[gateway]:-}") rcpu=$(median "$ratio_cpu")
td=$(median "${ttfb[direct]}") tx=$(median "${ttfb[proxy]}") tg=$(median "${ttfb[gateway]}") tdiff=$(median "$ttfb_diff")
rr50=$(median "$ratio_p50") rrps=$(median "$ratio_rps")

awk -v d50="$d50" -v x50="$x50" -v g50="$g50" -v d99="$d99" -v x99="$x99" -v g99="$g99" \
    -v drps="$drps" -v xrps="$xrps" -v grps="$grps" -v xcpu="$xcpu" -v gcpu="$gcpu" -v rcpu="$rcpu" -v tdiff="$tdiff" \
    -v rr50="$rr50" -v rrps="$rrps" -v range50="$(range "$ratio_p50")" -v rangerps="$(range "$ratio_rps")" \
    -v td="$td" -v tx="$tx" -v tg="$tg" -v rounds="$ROUNDS" -v dur="$DURATION" 'BEGIN {
  printf "\nbench-http: %d interleaved rounds, %s per wrk run, 100 streams per round for the time to first byte\n", rounds, dur
  printf "(benchhttp ttfb); loopback. Values are medians over the rounds; gateway / proxy is the median of the\n"
  printf "ratios taken within each round, with their range in brackets.\n\n"
  printf "| measure | direct upstream | bare ReverseProxy | production_app | gateway / proxy |\n"
  printf "| --- | ---: | ---: | ---: | ---: |\n"
  printf "| p50 latency, c=1 | %.0f µs | %.0f µs | %.0f µs | |\n", d50, x50, g50
  printf "| p99 latency, c=1 | %.0f µs | %.0f µs | %.0f µs | |\n", d99, x99, g99
  printf "| added p50 over direct | | %.0f µs | %.0f µs | %.2f× (%s) |\n", x50-d50, g50-d50, rr50, range50
  printf "| throughput, c=32 | %.0f req/s | %.0f req/s | %.0f req/s | %.2f× (%s) |\n", drps, xrps, grps, rrps, rangerps
  if (xcpu != "nan" && gcpu != "nan")
    printf "| server CPU per request, c=32 | | %.1f µs | %.1f µs | %.2f× |\n", xcpu, gcpu, rcpu
  printf "| time to first streamed byte (p50) | %.3f ms | %.3f ms | %.3f ms | |\n", td, tx, tg
  printf "| added time to first byte over the proxy | | | %.3f ms | |\n", tdiff
  printf "\nbench-http: gateway / proxy: throughput %.2f×, added p50 %.2f×\n", rrps, rr50
}'
if [ -n "$BASE_REF" ]; then
  b50=$(median "${p50[base]}") b99=$(median "${p99[base]}") brps=$(median "${rps[base]}")
  tb=$(median "${ttfb[base]}")
  awk -v ref="$BASE_REF" -v d50="$d50" -v g50="$g50" -v b50="$b50" -v g99="$g99" -v b99="$b99" -v grps="$grps" -v brps="$brps" \
      -v rb50="$(median "$ratio_base_p50")" -v rbrps="$(median "$ratio_base_rps")" \
      -v tg="$tg" -v tb="$tb" 'BEGIN {
    printf "\nproduction_app now vs at %s, in the same rounds (now / then: the median of the ratios within each round):\n\n", ref
    printf "| measure | at %s | now | now / then |\n", ref
    printf "| --- | ---: | ---: | ---: |\n"
    printf "| p50 latency, c=1 | %.0f µs | %.0f µs | %.2f× |\n", b50, g50, g50/b50
    printf "| added p50 over direct | %.0f µs | %.0f µs | %.2f× |\n", b50-d50, g50-d50, rb50
    printf "| p99 latency, c=1 | %.0f µs | %.0f µs | %.2f× |\n", b99, g99, g99/b99
    printf "| throughput, c=32 | %.0f req/s | %.0f req/s | %.2f× |\n", brps, grps, rbrps
    printf "| time to first streamed byte (p50) | %.3f ms | %.3f ms | %.2f× |\n", tb, tg, tg/tb
  }'
fi
