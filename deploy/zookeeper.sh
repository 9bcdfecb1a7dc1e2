#!/usr/bin/env bash
# Install, start, stop and query a standalone ZooKeeper server for stormlet (Debian's package,
# no systemd).
#
#   deploy/zookeeper.sh install
#   deploy/zookeeper.sh start  --port P --data-dir D [--tick-time MS] [--address A] [--foreground]
#   deploy/zookeeper.sh stop   --data-dir D
#   deploy/zookeeper.sh status --port P [--address A]
#
# --address A is the address the server listens on (zoo.cfg's clientPortAddress), and `status`
# asks there. The default, 127.0.0.1, serves this machine only: for daemons on other machines
# give this machine's address, or 0.0.0.0 for every interface (`status` then asks on loopback).
#
# `start` writes D/zoo.cfg (from deploy/zoo.cfg.template) and D/log4j.properties, then launches
# QuorumPeerMain directly with java (Debian's zkServer.sh hard-codes its config and log dirs).
# In the background (the default) it writes D/zookeeper.pid, logs to D/zookeeper.log (rolling;
# the JVM's own stdout/stderr go to D/zookeeper.out) and returns once the server answers `srvr`
# with a `Mode:` line. ZooKeeper keeps its snapshots and transaction logs in D/version-2.
#
# Exit status: 0 success; 1 failure; 2 usage error; `status` exits 3 when nothing answers.
# Environment: ZK_START_TIMEOUT (seconds, default 20), ZK_STOP_TIMEOUT (seconds before KILL,
# default 5), ZK_HEAP (default 256m), JAVA (java binary, default: java on PATH).
set -euo pipefail

readonly PROG=${0##*/}
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SCRIPT_DIR
readonly TEMPLATE="$SCRIPT_DIR/zoo.cfg.template"
readonly JAVA_DIR=/usr/share/java
readonly ZK_JAR="$JAVA_DIR/zookeeper.jar"
readonly MAIN_CLASS=org.apache.zookeeper.server.quorum.QuorumPeerMain
readonly START_TIMEOUT=${ZK_START_TIMEOUT:-20}
readonly STOP_TIMEOUT=${ZK_STOP_TIMEOUT:-5}
readonly HEAP=${ZK_HEAP:-256m}

die() { echo "$PROG: error: $*" >&2; exit 1; }
usage_error() { echo "$PROG: $*" >&2; usage >&2; exit 2; }
info() { echo "$PROG: $*"; }

usage() {
  cat <<EOF
usage: $PROG install
       $PROG start  --port P --data-dir D [--tick-time MS] [--address A] [--foreground]
       $PROG stop   --data-dir D
       $PROG status --port P [--address A]

  --address A   the address ZooKeeper listens on (default 127.0.0.1: this machine only);
                daemons on other machines need this machine's address, or 0.0.0.0 for every
                interface. status asks there (a wildcard: on loopback).
EOF
}

java_bin() { echo "${JAVA:-java}"; }

# ---------------------------------------------------------------------------------------------
# install

cmd_install() {
  local need_zk=0 need_java=0
  [[ -f $ZK_JAR ]] || need_zk=1
  command -v "$(java_bin)" >/dev/null 2>&1 || need_java=1
  if (( !need_zk && !need_java )); then
    info "ZooKeeper ($ZK_JAR) and java ($(command -v "$(java_bin)")) already installed"
    return 0
  fi
  [[ $(id -u) -eq 0 ]] || die "installing packages needs root (run: sudo $0 install)"
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install Debian's zookeeper package by hand"
  local pkgs=()
  (( need_zk )) && pkgs+=(zookeeper)
  (( need_java )) && pkgs+=(default-jre-headless)
  info "installing ${pkgs[*]} with apt-get"
  apt-get update || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}" \
    || die "apt-get install ${pkgs[*]} failed"
  [[ -f $ZK_JAR ]] || die "package installed but $ZK_JAR is still missing"
  command -v "$(java_bin)" >/dev/null 2>&1 || die "package installed but no java on PATH"
  info "installed ${pkgs[*]}"
}

# ---------------------------------------------------------------------------------------------
# helpers

require_installed() {
  [[ -f $ZK_JAR ]] || die "ZooKeeper is not installed ($ZK_JAR missing): run '$0 install'"
  command -v "$(java_bin)" >/dev/null 2>&1 || die "java not found: run '$0 install'"
}

check_port() {
  if ! [[ $1 =~ ^[0-9]{1,5}$ ]] || (( 10#$1 < 1 || 10#$1 > 65535 )); then
    usage_error "--port must be an integer in 1..65535, got '$1'"
  fi
}

# The address to connect to for a server listening on $1 (wildcards mean loopback).
connect_address() {
  case $1 in
    0.0.0.0|'') echo 127.0.0.1 ;;
    ::|'[::]') echo ::1 ;;
    *) echo "$1" ;;
  esac
}

# four_letter ADDR PORT WORD [SECONDS]: print the server's answer to a four-letter word (empty
# if none within SECONDS, default 3).
four_letter() {
  # shellcheck disable=SC2016  # expanded by the inner bash
  timeout "${4:-3}" bash -c 'exec 3<>"/dev/tcp/$1/$2" && printf %s "$3" >&3 && cat <&3' \
    _ "$(connect_address "$1")" "$2" "$3" 2>/dev/null || true
}

# port_open ADDR PORT: does anything accept TCP connections there?
port_open() {
  # shellcheck disable=SC2016  # expanded by the inner bash
  timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$(connect_address "$1")" "$2" 2>/dev/null
}

# Is process $1 alive? A zombie counts as dead: this machine's init may take seconds to reap.
alive() {
  local stat
  kill -0 "$1" 2>/dev/null || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}

# Is pid $1 alive and our ZooKeeper for config file $2?
is_our_server() {
  local pid=$1 cfg=$2 cmdline
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  cmdline=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
  grep -qxF "$MAIN_CLASS" <<<"$cmdline" && grep -qxF "$cfg" <<<"$cmdline"
}

read_pid() { if [[ -f $1 ]]; then tr -dc '0-9' <"$1"; fi; }

log_tail() {
  local d=$1 f
  for f in "$d/zookeeper.log" "$d/zookeeper.out"; do
    if [[ -s $f ]]; then
      echo "---- last lines of $f ----" >&2
      tail -n 40 "$f" >&2
    fi
  done
}

# Value of KEY in a zoo.cfg-style file (empty if absent).
cfg_value() { sed -n "s/^$2=//p" "$1" 2>/dev/null | tail -n 1; }

write_config() {
  local dir=$1 port=$2 tick=$3 address=$4 cfg=$1/zoo.cfg text
  [[ -r $TEMPLATE ]] || die "template $TEMPLATE not found"
  text=$(<"$TEMPLATE")
  # Quoted replacements: no '&' expansion (bash 5.2 patsub_replacement).
  text=${text//@TICK_TIME@/"$tick"}
  text=${text//@DATA_DIR@/"$dir"}
  text=${text//@CLIENT_PORT@/"$port"}
  text=${text//@CLIENT_PORT_ADDRESS@/"$address"}
  if grep -v '^[[:space:]]*#' <<<"$text" | grep -q '@[A-Z_]*@'; then
    die "template $TEMPLATE has a placeholder this script does not fill: $(grep -o '@[A-Z_]*@' <<<"$text" | head -n 1)"
  fi
  printf '%s\n' "$text" >"$cfg.tmp"
  mv -f "$cfg.tmp" "$cfg"

  cat >"$dir/log4j.properties.tmp" <<'EOF'
# Generated by deploy/zookeeper.sh. The log directory, file and root logger come from system
# properties set on the java command line.
zookeeper.root.logger=INFO, CONSOLE
zookeeper.log.dir=.
zookeeper.log.file=zookeeper.log
log4j.rootLogger=${zookeeper.root.logger}

log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n

log4j.appender.ROLLINGFILE=org.apache.log4j.RollingFileAppender
log4j.appender.ROLLINGFILE.File=${zookeeper.log.dir}/${zookeeper.log.file}
log4j.appender.ROLLINGFILE.MaxFileSize=10MB
log4j.appender.ROLLINGFILE.MaxBackupIndex=5
log4j.appender.ROLLINGFILE.layout=org.apache.log4j.PatternLayout
log4j.appender.ROLLINGFILE.layout.ConversionPattern=%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n
EOF
  mv -f "$dir/log4j.properties.tmp" "$dir/log4j.properties"
}

# ---------------------------------------------------------------------------------------------
# start

cmd_start() {
  local port='' dir='' tick=2000 address=127.0.0.1 foreground=0
  while (( $# )); do
    case $1 in
      --port) [[ $# -ge 2 ]] || usage_error "--port needs a value"; port=$2; shift 2 ;;
      --data-dir) [[ $# -ge 2 ]] || usage_error "--data-dir needs a value"; dir=$2; shift 2 ;;
      --tick-time) [[ $# -ge 2 ]] || usage_error "--tick-time needs a value"; tick=$2; shift 2 ;;
      --address) [[ $# -ge 2 ]] || usage_error "--address needs a value"; address=$2; shift 2 ;;
      --foreground) foreground=1; shift ;;
      *) usage_error "start: unknown argument '$1'" ;;
    esac
  done
  [[ -n $port ]] || usage_error "start needs --port"
  [[ -n $dir ]] || usage_error "start needs --data-dir"
  check_port "$port"
  port=$((10#$port))
  if ! [[ $tick =~ ^[0-9]{1,9}$ ]] || (( 10#$tick == 0 )); then
    usage_error "--tick-time must be a positive integer (milliseconds), got '$tick'"
  fi
  tick=$((10#$tick))
  [[ -n $address && $address != *[[:space:]]* ]] || usage_error "--address must not be empty or contain spaces"
  # zoo.cfg is a Java properties file: keep the path free of escapes and line breaks.
  [[ $dir != *\\* && $dir != *$'\n'* ]] || usage_error "--data-dir must not contain backslashes or newlines"
  require_installed

  mkdir -p -- "$dir" || die "cannot create data directory '$dir'"
  dir=$(realpath -- "$dir")
  [[ -w $dir ]] || die "data directory '$dir' is not writable"
  local cfg=$dir/zoo.cfg pidfile=$dir/zookeeper.pid pid
  pid=$(read_pid "$pidfile")

  if [[ -n $pid ]] && is_our_server "$pid" "$cfg"; then
    local running_port running_address
    running_port=$(cfg_value "$cfg" clientPort)
    running_address=$(cfg_value "$cfg" clientPortAddress)
    if [[ $running_port != "$port" || $running_address != "$address" ]]; then
      die "a ZooKeeper (pid $pid) already runs on data dir $dir at $running_address:$running_port; stop it first ('$0 stop --data-dir $dir')"
    fi
    (( foreground )) && die "ZooKeeper already runs in the background on $dir (pid $pid)"
    if ! wait_ready "$pid" "$address" "$port"; then
      echo "$PROG: error: the running ZooKeeper (pid $pid) does not answer 'srvr' on $address:$port; it was left running (stop it with '$0 stop --data-dir $dir')" >&2
      log_tail "$dir"
      exit 1
    fi
    info "ZooKeeper already running (pid $pid) on $address:$port, data dir $dir"
    return 0
  fi
  [[ -z $pid ]] || { info "removing stale pid file $pidfile (pid $pid is not running)"; rm -f -- "$pidfile"; }

  # srvr first: a bare connect-and-close makes ZooKeeper log a stack trace.
  if [[ $(four_letter "$address" "$port" srvr 1) == *Mode:* ]]; then
    die "port $address:$port is already used by another ZooKeeper (not the one for data dir $dir)"
  fi
  if port_open "$address" "$port"; then
    die "port $address:$port is already in use by another program"
  fi

  write_config "$dir" "$port" "$tick" "$address"

  local java
  java=$(command -v "$(java_bin)")
  local cp="$dir:$ZK_JAR:$JAVA_DIR/zookeeper-jute.jar:$JAVA_DIR/slf4j-api.jar:$JAVA_DIR/slf4j-log4j12.jar:$JAVA_DIR/log4j-1.2.jar"
  local -a args=(
    "-Xmx$HEAP" -XX:+UseSerialGC
    "-Dlog4j.configuration=file:$dir/log4j.properties"
    "-Dzookeeper.log.dir=$dir" -Dzookeeper.log.file=zookeeper.log
    -Dzookeeper.jmx.log4j.disable=true
    -cp "$cp" "$MAIN_CLASS" "$cfg"
  )

  if (( foreground )); then
    echo $$ >"$pidfile"
    info "starting ZooKeeper in the foreground on $address:$port, data dir $dir (pid $$)"
    exec "$java" -Dzookeeper.root.logger=INFO,CONSOLE "${args[@]}"
  fi

  : >>"$dir/zookeeper.out"
  {
    echo "==== $(date -Is) $PROG start --port $port --address $address --tick-time $tick"
  } >>"$dir/zookeeper.out"
  # setsid: detach from the caller's session and process group, so its signals (Ctrl-C, a test
  # runner's process group) do not reach the server. A background child of a script is not a
  # process group leader, so setsid execs java in place and $! is java's pid.
  setsid "$java" -Dzookeeper.root.logger=INFO,ROLLINGFILE "${args[@]}" \
    </dev/null >>"$dir/zookeeper.out" 2>&1 &
  pid=$!
  disown "$pid"  # no job-status chatter from this shell if it has to kill the server
  echo "$pid" >"$pidfile.tmp"
  mv -f "$pidfile.tmp" "$pidfile"
  if ! wait_ready "$pid" "$address" "$port"; then
    if alive "$pid"; then
      echo "$PROG: error: ZooKeeper (pid $pid) did not answer 'srvr' on $address:$port within ${START_TIMEOUT}s: killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" 50 || true
    else
      echo "$PROG: error: ZooKeeper (pid $pid) exited during start-up" >&2
    fi
    rm -f -- "$pidfile"
    log_tail "$dir"
    exit 1
  fi
  info "ZooKeeper started (pid $pid) on $address:$port, data dir $dir"
}

# wait_ready PID ADDR PORT: wait until the server answers srvr with a Mode: line (status 0);
# status 1 if the process dies or ZK_START_TIMEOUT passes first.
wait_ready() {
  local pid=$1 address=$2 port=$3 deadline
  deadline=$(( $(date +%s%N) / 1000000 + START_TIMEOUT * 1000 ))
  while alive "$pid"; do
    [[ $(four_letter "$address" "$port" srvr) == *Mode:* ]] && return 0
    (( $(date +%s%N) / 1000000 < deadline )) || return 1
    sleep 0.1
  done
  return 1
}

# ---------------------------------------------------------------------------------------------
# stop

# wait_gone PID TENTHS: wait up to TENTHS tenths of a second for PID to exit (status 1 if not).
wait_gone() {
  local i
  for (( i = 0; i < $2; i++ )); do
    alive "$1" || return 0
    sleep 0.1
  done
  ! alive "$1"
}

cmd_stop() {
  local dir=''
  while (( $# )); do
    case $1 in
      --data-dir) [[ $# -ge 2 ]] || usage_error "--data-dir needs a value"; dir=$2; shift 2 ;;
      *) usage_error "stop: unknown argument '$1'" ;;
    esac
  done
  [[ -n $dir ]] || usage_error "stop needs --data-dir"
  if [[ ! -d $dir ]]; then
    info "data directory '$dir' does not exist: nothing to stop"
    return 0
  fi
  dir=$(realpath -- "$dir")
  local pidfile=$dir/zookeeper.pid cfg=$dir/zoo.cfg pid
  pid=$(read_pid "$pidfile")
  if [[ -z $pid ]]; then
    rm -f -- "$pidfile"
    info "ZooKeeper is not running (no pid file in $dir)"
    return 0
  fi
  if ! is_our_server "$pid" "$cfg"; then
    rm -f -- "$pidfile"
    info "ZooKeeper is not running (removed stale pid file; pid $pid is not a ZooKeeper for $dir)"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_gone "$pid" $(( STOP_TIMEOUT * 10 )); then
    info "ZooKeeper (pid $pid) still running after ${STOP_TIMEOUT}s: sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" 50 || die "ZooKeeper (pid $pid) survived KILL"
  fi
  rm -f -- "$pidfile"
  info "ZooKeeper stopped (pid $pid)"
}

# ---------------------------------------------------------------------------------------------
# status

cmd_status() {
  local port='' address=127.0.0.1
  while (( $# )); do
    case $1 in
      --port) [[ $# -ge 2 ]] || usage_error "--port needs a value"; port=$2; shift 2 ;;
      --address) [[ $# -ge 2 ]] || usage_error "--address needs a value"; address=$2; shift 2 ;;
      *) usage_error "status: unknown argument '$1'" ;;
    esac
  done
  [[ -n $port ]] || usage_error "status needs --port"
  check_port "$port"
  local answer
  answer=$(four_letter "$address" "$port" srvr)
  if [[ $answer == *Mode:* ]]; then
    info "ZooKeeper running on $address:$port"
    printf '%s\n' "$answer"
    return 0
  fi
  if port_open "$address" "$port"; then
    echo "$PROG: $address:$port accepts connections but does not answer 'srvr' like ZooKeeper" >&2
  else
    echo "$PROG: no ZooKeeper answering on $address:$port" >&2
  fi
  return 3
}

# ---------------------------------------------------------------------------------------------

main() {
  (( $# )) || { usage >&2; exit 2; }
  local cmd=$1; shift
  case $cmd in
    install) (( $# == 0 )) || usage_error "install takes no arguments"; cmd_install ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop "$@" ;;
    status) cmd_status "$@" ;;
    -h|--help|help) usage ;;
    *) usage_error "unknown command '$cmd'" ;;
  esac
}

main "$@"
