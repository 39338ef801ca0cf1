#!/usr/bin/env bash
# make bench-redis: the shared rate limiter's decisions per second on one
# Redis, pipelined (what secure_app runs) and plain, side by side with
# go-redis/redis_rate in interleaved rounds (cmd/benchredis). Uses REDIS_URL
# if set; otherwise starts a redis-server of its own on a free loopback
# port, and stops it at the end. ARGS are passed to benchredis (-h lists them).
set -euo pipefail
cd "$(dirname "$0")/.."

redis_pid=""
cleanup() { if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT
if [ -z "${REDIS_URL:-}" ]; then
  command -v redis-server >/dev/null || { echo "bench-redis: needs Redis: set REDIS_URL, or install redis-server (apt-get install redis-server)"; exit 1; }
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 16381)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
  redis_pid=$!
  for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  export REDIS_URL="redis://127.0.0.1:$port/0"
  echo "bench-redis: started redis-server on port $port for this run"
fi
echo "bench-redis: building cmd/benchredis…"
mkdir -p bin
go build -o bin/benchredis ./cmd/benchredis
# shellcheck disable=SC2086 # ARGS is a list of flags
bin/benchredis ${ARGS:-}
