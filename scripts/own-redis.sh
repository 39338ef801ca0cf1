# Sourced by scripts that need a Redis: when REDIS_URL (and, where it is
# honoured, REDIS_CLUSTER_ADDRS) is unset, start_own_redis NAME starts a
# redis-server of this run's own on a free loopback port, keeping nothing on
# disk, exports REDIS_URL, and stops it when the script exits.
redis_pid=""
stop_own_redis() { if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi; }

start_own_redis() {
  local name=$1
  trap stop_own_redis EXIT
  if [ -n "${REDIS_URL:-}" ] || [ -n "${REDIS_CLUSTER_ADDRS:-}" ]; then
    return 0
  fi
  command -v redis-server >/dev/null || { echo "$name: needs Redis: set REDIS_URL, or install redis-server (apt-get install redis-server)"; exit 1; }
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 16380)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null &
  redis_pid=$!
  for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  export REDIS_URL="redis://127.0.0.1:$port/0"
  echo "$name: started redis-server on port $port for this run"
}
