#!/usr/bin/env bash
# make bench-redis: the shared rate limiter's decisions per second on one
# Redis, pipelined (what secure_app runs) and plain, side by side with
# go-redis/redis_rate in interleaved rounds (cmd/benchredis). Uses REDIS_URL
# if set; otherwise starts a redis-server of its own on a free loopback
# port, and stops it at the end. ARGS are passed to benchredis (-h lists them).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/own-redis.sh
. scripts/own-redis.sh
start_own_redis bench-redis
echo "bench-redis: building cmd/benchredis…"
mkdir -p bin
go build -o bin/benchredis ./cmd/benchredis
# shellcheck disable=SC2086 # ARGS is a list of flags
bin/benchredis ${ARGS:-}
