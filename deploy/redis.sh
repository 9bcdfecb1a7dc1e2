#!/usr/bin/env bash
# Install, start, stop and query a Redis server for stormlet's redis state provider (Debian's
# redis-server package, no systemd).
#
#   deploy/redis.sh install
#   deploy/redis.sh start  --port P --data-dir D [--address A] [--fsync always|everysec] [--foreground]
#   deploy/redis.sh stop   --data-dir D
#   deploy/redis.sh status --port P [--address A]
#
# `start` runs redis-server with its append-only file in D (appendfsync `always` by default: a
# checkpoint Redis has acknowledged survives kill -9 of Redis and a crash of the machine;
# `everysec` risks the last second for speed). In the background (the default) it writes
# D/redis.pid, logs to D/redis.log and returns once the server answers PING; with --foreground
# it becomes the server (exec), for supervisors and tests that signal it themselves.
#
# Exit status: 0 success; 1 failure; 2 usage error; `status` exits 3 when nothing answers.
# Environment: REDIS_START_TIMEOUT (seconds, default 10), REDIS_STOP_TIMEOUT (seconds before
# KILL, default 5).
set -euo pipefail

readonly PROG=${0##*/}
readonly START_TIMEOUT=${REDIS_START_TIMEOUT:-10}
readonly STOP_TIMEOUT=${REDIS_STOP_TIMEOUT:-5}

die() { echo "$PROG: error: $*" >&2; exit 1; }
usage_error() { echo "$PROG: $*" >&2; usage >&2; exit 2; }
info() { echo "$PROG: $*"; }

usage() {
  cat <<USAGE
usage: $PROG install
       $PROG start  --port P --data-dir D [--address A] [--fsync always|everysec] [--foreground]
       $PROG stop   --data-dir D
       $PROG status --port P [--address A]
USAGE
}

cmd_install() {
  if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
    info "redis-server already installed ($(redis-server --version | cut -d' ' -f3))"
    return 0
  fi
  [[ $(id -u) -eq 0 ]] || die "installing packages needs root (run: sudo $0 install)"
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install Redis by hand"
  info "installing redis-server with apt-get"
  apt-get update || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
    || die "apt-get install redis-server failed"
  command -v redis-server >/dev/null 2>&1 || die "package installed but no redis-server on PATH"
  info "installed redis-server"
}

check_port() {
  if ! [[ $1 =~ ^[0-9]{1,5}$ ]] || (( 10#$1 < 1 || 10#$1 > 65535 )); then
    usage_error "--port must be an integer in 1..65535, got '$1'"
  fi
}

answers() { [[ $(redis-cli -h "$1" -p "$2" ping 2>/dev/null) == PONG ]]; }

cmd_start() {
  local port='' dir='' address=127.0.0.1 fsync=always foreground=0
  while (( $# )); do
    case $1 in
      --port) port=${2:-}; shift 2 ;;
      --data-dir) dir=${2:-}; shift 2 ;;
      --address) address=${2:-}; shift 2 ;;
      --fsync) fsync=${2:-}; shift 2 ;;
      --foreground) foreground=1; shift ;;
      *) usage_error "unknown option for start: $1" ;;
    esac
  done
  [[ -n $port && -n $dir ]] || usage_error "start needs --port and --data-dir"
  check_port "$port"
  [[ $fsync == always || $fsync == everysec ]] || usage_error "--fsync takes always or everysec"
  command -v redis-server >/dev/null 2>&1 || die "redis-server is not installed: run '$0 install'"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local args=(--port "$port" --bind "$address" --dir "$dir" --save "" --appendonly yes
              --appendfsync "$fsync" --protected-mode yes)
  if (( foreground )); then
    exec redis-server "${args[@]}" --daemonize no
  fi
  answers "$address" "$port" && die "something already answers on $address:$port"
  redis-server "${args[@]}" --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
    || die "redis-server did not start (see $dir/redis.log)"
  local waited=0
  until answers "$address" "$port"; do
    (( waited >= START_TIMEOUT * 10 )) && die "redis-server did not answer on $address:$port within ${START_TIMEOUT}s (see $dir/redis.log)"
    sleep 0.1; waited=$((waited + 1))
  done
  info "redis-server answering on $address:$port (data in $dir)"
}

cmd_stop() {
  local dir=''
  while (( $# )); do
    case $1 in
      --data-dir) dir=${2:-}; shift 2 ;;
      *) usage_error "unknown option for stop: $1" ;;
    esac
  done
  [[ -n $dir ]] || usage_error "stop needs --data-dir"
  local pidfile="$dir/redis.pid"
  [[ -f $pidfile ]] || { info "no $pidfile: not running"; return 0; }
  local pid
  pid=$(<"$pidfile")
  if kill -TERM "$pid" 2>/dev/null; then
    local waited=0
    while kill -0 "$pid" 2>/dev/null; do
      if (( waited >= STOP_TIMEOUT * 10 )); then kill -KILL "$pid" 2>/dev/null || true; break; fi
      sleep 0.1; waited=$((waited + 1))
    done
  fi
  rm -f "$pidfile"
  info "stopped"
}

cmd_status() {
  local port='' address=127.0.0.1
  while (( $# )); do
    case $1 in
      --port) port=${2:-}; shift 2 ;;
      --address) address=${2:-}; shift 2 ;;
      *) usage_error "unknown option for status: $1" ;;
    esac
  done
  [[ -n $port ]] || usage_error "status needs --port"
  check_port "$port"
  if answers "$address" "$port"; then info "answering on $address:$port"; else exit 3; fi
}

(( $# )) || { usage >&2; exit 2; }
command=$1; shift
case $command in
  install) cmd_install "$@" ;;
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  status) cmd_status "$@" ;;
  -h|--help) usage ;;
  *) usage_error "unknown command: $command" ;;
esac
