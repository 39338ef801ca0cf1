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

# shellcheck source=scripts/own-redis.sh
. scripts/own-redis.sh
start_own_redis run-secure

token=$(bin/secure_app token --tenant demo --tier pro --ttl 12h)
echo "run-secure: a dev token for tenant demo (tier pro), valid 12 h:"
echo
echo "  export TOKEN=$token"
echo
# shellcheck disable=SC2086 # ARGS is a list of flags on purpose
bin/secure_app -dev ${ARGS:-}
