#!/usr/bin/env bash
# Make sure a Redis server is reachable for the `redis` feature's tests, and export its URL as
# TOWER_THROTTLE_REDIS_URL. Sourced by .ci/run (or run alone: `source .ci/redis.sh`).
#
# 1. TOWER_THROTTLE_REDIS_URL already set: kept as is.
# 2. Else a Redis answering PING on 127.0.0.1:6379: used.
# 3. Else `redis-server` started on a free port (daemonized, no persistence), stopped on exit.
# The `redis-server` binary is installed (Debian package) when missing: the restart test
# runs a private server of its own.

tt_redis_ping() { # host port -> 0 when the server answers +PONG
  local line
  if command -v redis-cli >/dev/null 2>&1; then
    [ "$(redis-cli -h "$1" -p "$2" ping 2>/dev/null)" = "PONG" ]
    return
  fi
  exec 3<>"/dev/tcp/$1/$2" 2>/dev/null || return 1
  printf 'PING\r\n' >&3
  IFS= read -r -t 2 line <&3 || line=""
  exec 3<&- 3>&-
  [ "${line%$'\r'}" = "+PONG" ]
}

tt_redis_install() {
  command -v redis-server >/dev/null 2>&1 && return 0
  echo "redis.sh: redis-server not found; installing the Debian package" >&2
  local sudo=""
  [ "$(id -u)" = "0" ] || sudo="sudo"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "redis.sh: no apt-get: install redis-server yourself" >&2
    return 1
  fi
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
  command -v redis-server >/dev/null 2>&1
}

tt_redis_free_port() {
  local p
  for p in $(seq 6390 6499); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

tt_redis_setup() {
  tt_redis_install || return 1
  if [ -n "${TOWER_THROTTLE_REDIS_URL:-}" ]; then
    echo "redis.sh: using TOWER_THROTTLE_REDIS_URL=$TOWER_THROTTLE_REDIS_URL"
    return 0
  fi
  if tt_redis_ping 127.0.0.1 6379; then
    export TOWER_THROTTLE_REDIS_URL="redis://127.0.0.1:6379"
    echo "redis.sh: using the Redis on 127.0.0.1:6379"
    return 0
  fi
  local port dir
  port="$(tt_redis_free_port)" || { echo "redis.sh: no free port" >&2; return 1; }
  dir="$(mktemp -d)"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize yes --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" || return 1
  TT_REDIS_PIDFILE="$dir/redis.pid"
  trap 'tt_redis_stop' EXIT
  local i
  for i in $(seq 1 100); do
    if tt_redis_ping 127.0.0.1 "$port"; then
      export TOWER_THROTTLE_REDIS_URL="redis://127.0.0.1:$port"
      echo "redis.sh: started redis-server on 127.0.0.1:$port"
      return 0
    fi
    sleep 0.1
  done
  echo "redis.sh: redis-server did not answer on port $port; its log:" >&2
  cat "$dir/redis.log" >&2 || true
  return 1
}

tt_redis_stop() {
  if [ -n "${TT_REDIS_PIDFILE:-}" ] && [ -f "$TT_REDIS_PIDFILE" ]; then
    kill "$(cat "$TT_REDIS_PIDFILE")" 2>/dev/null || true
  fi
}

tt_redis_setup || { echo "redis.sh: no Redis for the tests" >&2; return 1 2>/dev/null || exit 1; }
