#!/usr/bin/env bash
# make stack-up / make stack-down: the full stack of docker-compose.yml.
# Needs a Docker engine and the compose plugin (`docker compose`); without
# them it says so and stops. The stack's configuration is checked without
# Docker by `make test-stack`.
set -euo pipefail
cd "$(dirname "$0")/.."

need_engine() {
  if ! command -v docker >/dev/null; then
    echo "stack: needs Docker (the client and an engine) with the compose plugin; docker is not on PATH."
    echo "       Without Docker: make test-stack checks the compose file, the dashboard and every query on a real Prometheus."
    exit 1
  fi
  if ! docker compose version >/dev/null 2>&1; then
    echo "stack: needs the compose plugin: 'docker compose version' fails here (install docker-compose-plugin)."
    exit 1
  fi
  if ! docker info >/dev/null 2>&1; then
    echo "stack: no Docker engine answers ('docker info' fails): start one (dockerd, Docker Desktop, colima) and retry."
    exit 1
  fi
}

case "${1:-}" in
  up)
    need_engine
    docker compose up -d --build --wait
    token=$(docker compose exec -T gateway-1 /secure_app token --tenant demo --tier pro --ttl 12h)
    cat <<EOT

stack: up. Every port is on 127.0.0.1:
  gateway-1     http://127.0.0.1:8080/v1   metrics http://127.0.0.1:9464/metrics
  gateway-2     http://127.0.0.1:8081/v1   metrics http://127.0.0.1:9465/metrics
  mockupstream  http://127.0.0.1:8090/v1   (the upstream both gateways call)
  prometheus    http://127.0.0.1:9090
  grafana       http://127.0.0.1:3000      the "Gateway" dashboard is the home page
  traces        docker compose logs -f otel-collector

A dev token for tenant demo (tier pro), valid 12 h:

  export TOKEN=$token
  for i in \$(seq 1 300); do for p in 8080 8081; do
    curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:\$p/v1/chat/completions -H "Authorization: Bearer \$TOKEN" \\
      -H 'Content-Type: application/json' -d '{"model":"auto","messages":[{"role":"user","content":"hello"}]}'
  done; sleep 0.2; done

make stack-down stops it.
EOT
    ;;
  down)
    need_engine
    docker compose down --volumes --remove-orphans
    ;;
  *)
    echo "usage: scripts/stack.sh up|down"
    exit 2
    ;;
esac
