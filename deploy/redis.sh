#!/usr/bin/env bash
# Install, start, stop and query a Redis server for stormlet's redis state provider (Debian's
# redis-server package, no systemd).
#
#   deploy/redis.sh install
#   deploy/redis.sh start  --port P --data-dir D [--address A] [--password-file F] [--fsync always|everysec] [--foreground]
#   deploy/redis.sh stop   --data-dir D
#   deploy/redis.sh status --port P [--address A] [--password-file F]
#
# `start` runs redis-server with its append-only file in D (appendfsync `always` by default: a
# checkpoint Redis has acknowledged survives kill -9 of Redis and a crash of the machine;
# `everysec` risks the last second for speed). In the background (the default) it writes
# D/redis.pid, logs to D/redis.log and returns once the server answers PING; with --foreground
# it becomes the server (exec), for supervisors and tests that signal it themselves.
#
# Redis's protected mode (on) refuses every client not on loopback while the server has no
# password: a server for the workers of other machines (--address other than loopback) needs
# --password-file, a file whose one line (no spaces) becomes its password (`requirepass`, given on
# stdin, not in the command line), the same as the provider config's "password".
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
       $PROG start  --port P --data-dir D [--address A] [--password-file F] [--fsync always|everysec] [--foreground]
       $PROG stop   --data-dir D
       $PROG status --port P [--address A] [--password-file F]
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

# The password in file $1 (one line, no spaces): exported for redis-cli, and printed.
read_password() {
  [[ -r $1 ]] || die "cannot read the password file $1"
  local password
  password=$(head -n 1 -- "$1")
  [[ $password =~ ^[^[:space:]\"\']+$ ]] || die "the password file $1 must hold one word (no spaces or quotes)"
  export REDISCLI_AUTH=$password
  printf '%s' "$password"
}

cmd_start() {
  local port='' dir='' address=127.0.0.1 fsync=always foreground=0 password_file='' password=''
  while (( $# )); do
    case $1 in
      --port) port=${2:-}; shift 2 ;;
      --data-dir) dir=${2:-}; shift 2 ;;
      --address) address=${2:-}; shift 2 ;;
      --password-file) password_file=${2:-}; shift 2 ;;
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
  if [[ -n $password_file ]]; then
    password=$(read_password "$password_file") || exit 1
    export REDISCLI_AUTH=$password
  fi
  # With a password, the server reads it from stdin (`-`: config from stdin), before the rest.
  local args=(--port "$port" --bind "$address" --dir "$dir" --save "" --appendonly yes
              --appendfsync "$fsync" --protected-mode yes)
  [[ -n $password ]] && args=(- "${args[@]}")
  if (( foreground )); then
    exec redis-server "${args[@]}" --daemonize no <<<"${password:+requirepass $password}"
  fi
  answers "$address" "$port" && die "something already answers on $address:$port"
  redis-server "${args[@]}" --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
    <<<"${password:+requirepass $password}" || die "redis-server did not start (see $dir/redis.log)"
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
      --password-file) REDISCLI_AUTH=$(read_password "${2:-}") || exit 1; export REDISCLI_AUTH
                       shift 2 ;;
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
