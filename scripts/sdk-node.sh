#!/usr/bin/env bash
# The official OpenAI Node SDK against production_app with its default
# simulated providers: chat, stream, tool round trip, json_schema, errors.
# Needs node ≥ 20 and npm; installs the pinned SDK from package-lock.json.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v node >/dev/null || { echo "sdk-node: node is not installed (apt-get install nodejs npm)"; exit 1; }
mkdir -p bin
echo "sdk-node: building production_app"
go build -o bin/production_app ./solutions/production_app
echo "sdk-node: installing the pinned openai package"
(cd scripts/sdk-node && npm ci --no-audit --no-fund --loglevel=error)

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 18181)
bin/production_app -addr "127.0.0.1:$port" -readiness-delay 0 -log-level warn >/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null && break; sleep 0.1; done
curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" || { echo "sdk-node: the gateway did not start"; exit 1; }

echo "sdk-node: running the Node SDK tests against http://127.0.0.1:$port"
(cd scripts/sdk-node && GATEWAY_URL="http://127.0.0.1:$port" node --test --test-reporter=spec test.mjs)
