#!/usr/bin/env bash
# make run-secure: secure_app on 127.0.0.1:8080 (metrics on 127.0.0.1:9464),
# with what it needs for a try-out and nothing you have to set up:
#   - the JWT secret: JWT_SECRET or JWT_SECRET_FILE if you set one; otherwise
#     a random one for this run, written to bin/run-secure.jwt-secret (mode
#     0600) and handed over as JWT_SECRET_FILE, so the token command the
#     startup lines print works as written in another shell;
#   - Redis: REDIS_URL if set; otherwise a redis-server of this run's own on
#     a free port, stopped when secure_app stops;
#   - a dev token for tenant "demo" on the pro tier, printed with a curl line;
#   - -dev (announced at start): this is a try-out, not a deployment.
# Extra flags go through: make run-secure ARGS="-tiers my-tiers.yaml"
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p bin
echo "run-secure: building secure_app"
go build -o bin/secure_app ./solutions/secure_app

if [ -z "${JWT_SECRET:-}" ] && [ -z "${JWT_SECRET_FILE:-}" ]; then
  secret_file="$PWD/bin/run-secure.jwt-secret"
  rm -f "$secret_file" # a new file, so the umask sets its mode: 0600 before a byte is in it
  (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$secret_file")
  export JWT_SECRET_FILE="$secret_file"
  echo "run-secure: JWT_SECRET is not set; a random secret for this run is in bin/run-secure.jwt-secret (tokens die with it)"
fi

redis_pid=""
cleanup() { if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT
if [ -z "${REDIS_URL:-}" ] && [ -z "${REDIS_CLUSTER_ADDRS:-}" ]; then
  command -v redis-server >/dev/null || { echo "run-secure: needs Redis: set REDIS_URL, or install redis-server (apt-get install redis-server)"; exit 1; }
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 16380)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
  redis_pid=$!
  for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  export REDIS_URL="redis://127.0.0.1:$port/0"
  echo "run-secure: started redis-server on port $port for this run"
fi

token=$(bin/secure_app token --tenant demo --tier pro --ttl 12h)
echo "run-secure: a dev token for tenant demo (tier pro), valid 12 h:"
echo
echo "  export TOKEN=$token"
echo
# shellcheck disable=SC2086 # ARGS is a list of flags on purpose
bin/secure_app -dev ${ARGS:-}
