#!/usr/bin/env bash
# A stormlet cluster across N hosts on this one machine, laid out as on real machines: each host
# is a Linux network namespace with an address of its own on a private bridge (as in the test
# harness, tests/multi_host.py). Host 1 runs ZooKeeper, nimbus and the UI; hosts 2..N a
# supervisor each. Every daemon listens on its host's address only and authenticates with a
# cluster secret; this machine joins the bridge at .1 and is the client.
#
#   deploy/demo-hosts.sh up N [DIR]   # N >= 2 hosts; DIR (default ./stormlet-demo) gets the
#                                     # secret, the data dirs and every daemon's log
#   deploy/demo-hosts.sh status       # each host's address and daemons, and `stormlet list`
#   deploy/demo-hosts.sh down         # kill everything on the hosts, delete them, the bridge
#                                     # and DIR; does nothing when nothing is up
#
# Needs root (network namespaces), `ip` (deploy/netns.sh install), ZooKeeper (installed with
# deploy/zookeeper.sh install if missing) and `stormlet` on PATH.
#
# Environment:
#   STORMLET_DEMO_PREFIX  names of everything made: namespaces PREFIX-h1.., bridge PREFIX-br,
#                         veths PREFIX-v1..; a letter, then up to 9 letters or digits
#                         (default sldemo; the test harness uses smh...)
#   STORMLET_DEMO_SUBNET  the hosts' /24, as its first three numbers (default 10.78.0; the test
#                         harness uses 10.77.0): host I is SUBNET.(10+I), this machine SUBNET.1
#   STORMLET_DEMO_SLOTS   each supervisor's worker ports (default 6700,6701)
#
# Exit status: 0 success; 1 failure; 2 usage error; `status` exits 3 when nothing is up.
set -euo pipefail

readonly PROG=${0##*/}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly HERE
readonly NETNS="$HERE/netns.sh"
readonly PREFIX=${STORMLET_DEMO_PREFIX:-sldemo}
readonly SUBNET=${STORMLET_DEMO_SUBNET:-10.78.0}
readonly SLOTS=${STORMLET_DEMO_SLOTS:-6700,6701}
readonly ZK_PORT=2181 NIMBUS_PORT=6627 UI_PORT=8080
readonly BRIDGE="$PREFIX-br"
# Where `up` notes its DIR for `status` and `down` (gone at reboot, as the namespaces are).
readonly RECORD="/run/stormlet-demo-hosts/$PREFIX"
# In DIR: what `up` made, and the mark that lets `down` delete DIR.
readonly MARK=demo-hosts.env

die() { echo "$PROG: error: $*" >&2; exit 1; }
usage_error() { echo "$PROG: $*" >&2; usage >&2; exit 2; }
info() { echo "$PROG: $*"; }

usage() {
  cat <<EOF
usage: $PROG up N [DIR]
       $PROG status
       $PROG down

  up N [DIR]   N hosts (N >= 2), network namespaces on a private bridge: host 1 runs
               ZooKeeper, nimbus and the UI, hosts 2..N a supervisor each; DIR (default
               ./stormlet-demo, empty or new) gets the secret, the data and the logs
  status       each host's address and daemons, and the topologies
  down         stop and delete everything up made (nothing up: does nothing)

environment: STORMLET_DEMO_PREFIX (default sldemo), STORMLET_DEMO_SUBNET (default 10.78.0),
             STORMLET_DEMO_SLOTS (default 6700,6701)
EOF
}

namespace() { echo "$PREFIX-h$1"; }
address() { echo "$SUBNET.$((10 + $1))"; }

check_settings() {
  [[ $PREFIX =~ ^[a-z][a-z0-9]{0,9}$ ]] \
    || die "STORMLET_DEMO_PREFIX must be a letter and up to 9 letters or digits, got '$PREFIX'"
  local octet='(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])'
  [[ $SUBNET =~ ^$octet\.$octet\.$octet$ ]] \
    || die "STORMLET_DEMO_SUBNET must be the first three numbers of a /24 (10.78.0), got '$SUBNET'"
  [[ $SLOTS =~ ^[0-9]+(,[0-9]+)*$ ]] \
    || die "STORMLET_DEMO_SLOTS must be comma-separated ports, got '$SLOTS'"
}

# require_root_and_ip ARGS...: refuse, saying why, unless hosts can be handled here.
require_root_and_ip() {
  [[ $(id -u) -eq 0 ]] || die "network namespaces need root (run: sudo $0 $*)"
  command -v ip >/dev/null 2>&1 || die "no 'ip' command: run '$NETNS install'"
}

# The hosts that exist now: their namespaces.
hosts_up() { ip netns list | awk '{print $1}' | awk -v p="$PREFIX-h" 'index($0, p) == 1'; }

# The pids and command lines of every process on namespace $1: "PID ARGS" lines.
processes() {
  local pid
  for pid in $(ip netns pids "$1" 2>/dev/null || true); do
    echo "$pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  done
}

# What a process is, from its command line (empty: none of the cluster's).
role() {
  case " $1 " in
    *QuorumPeerMain*) echo zookeeper ;;
    *" worker "*) echo worker ;;
    *" nimbus "*) echo nimbus ;;
    *" supervisor "*) echo supervisor ;;
    *" ui "*) echo ui ;;
  esac
}

log_tail() {
  echo "---- last lines of $1 ----" >&2
  tail -n 30 "$1" >&2 || true
}

# ---------------------------------------------------------------------------------------------
# up

# start_on HOST NAME ARGS...: `stormlet ARGS` on host HOST, in a session of its own (Ctrl-C at
# this terminal does not reach it), logging to DIR/NAME.log. A background child of a script
# leads no process group, so setsid execs in place: the pid in DIR/NAME.pid is the daemon's.
start_on() {
  local host=$1 name=$2
  shift 2
  ip netns exec "$(namespace "$host")" setsid stormlet "$@" \
    </dev/null >>"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
  disown $!
}

# wait_for NAME WHAT SECS COMMAND...: until COMMAND succeeds; fails showing daemon NAME's log
# if it exits first or SECS pass.
wait_for() {
  local name=$1 what=$2 secs=$3 i
  shift 3
  for (( i = 0; i < secs * 2; i++ )); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$(<"$dir/$name.pid")" 2>/dev/null; then
      echo "$PROG: error: $name exited before $what" >&2
      log_tail "$dir/$name.log"
      exit 1
    fi
    sleep 0.5
  done
  echo "$PROG: error: $name not $what within ${secs}s" >&2
  log_tail "$dir/$name.log"
  exit 1
}

cmd_up() {
  (( $# >= 1 && $# <= 2 )) || usage_error "up takes N and an optional DIR"
  local n=$1
  dir=${2:-stormlet-demo}
  if ! [[ $n =~ ^[0-9]+$ ]] || (( 10#$n < 2 || 10#$n > 200 )); then
    usage_error "N must be a number of hosts from 2 to 200, got '$n'"
  fi
  n=$((10#$n))
  require_root_and_ip up "$@"
  bash "$NETNS" check --without-nft >/dev/null || exit 1
  command -v stormlet >/dev/null || die "stormlet is not on PATH: pip install ."
  if [[ -n $(hosts_up) || -e $RECORD ]]; then
    die "demo hosts named $PREFIX-* are up already: '$0 down' first (or set STORMLET_DEMO_PREFIX)"
  fi
  if ip -o -4 addr show | grep -qF " $SUBNET." || [[ -n $(ip -4 route show "$SUBNET.0/24") ]]; then
    die "$SUBNET.0/24 is in use on this machine: choose another with STORMLET_DEMO_SUBNET"
  fi
  mkdir -p -- "$dir"
  dir=$(realpath -- "$dir")
  [[ -z $(ls -A -- "$dir") ]] || die "$dir is not empty: give an empty or new directory"
  bash "$HERE/zookeeper.sh" install

  # From here on a failure leaves what was made, for a look at its logs.
  trap 'if (( $? )); then echo "$PROG: up failed: what it made is left as it is; \"$0 down\" removes it" >&2; fi' EXIT
  local zk_address secret i
  zk_address=$(address 1)
  local zk="$zk_address:$ZK_PORT"
  secret="$dir/cluster.secret"
  mkdir -p "${RECORD%/*}"
  echo "$dir" >"$RECORD"
  printf 'PREFIX=%s\nSUBNET=%s\nHOSTS=%s\nZK=%s\nSECRET=%s\n' \
    "$PREFIX" "$SUBNET" "$n" "$zk" "$secret" >"$dir/$MARK"
  stormlet secret generate "$secret" >/dev/null

  bash "$NETNS" bridge "$BRIDGE" "$SUBNET.1/24"
  for (( i = 1; i <= n; i++ )); do
    bash "$NETNS" host "$(namespace "$i")" "$BRIDGE" "$PREFIX-v$i" "$(address "$i")/24"
  done
  info "made $n hosts on bridge $BRIDGE ($SUBNET.0/24; this machine is $SUBNET.1 on it)"

  # Host 1: ZooKeeper listening on its host's address (the default, loopback, serves no other
  # host), then nimbus and the UI.
  ip netns exec "$(namespace 1)" bash "$HERE/zookeeper.sh" start --port "$ZK_PORT" \
    --data-dir "$dir/zookeeper" --address "$zk_address" </dev/null
  local -a common=(--zk "$zk" --secret-file "$secret")
  start_on 1 nimbus nimbus "${common[@]}" --host "$zk_address" --bind "$zk_address" \
    --port "$NIMBUS_PORT" --data-dir "$dir/nimbus"
  wait_for nimbus leading 60 \
    stormlet --log-level WARNING list "${common[@]}"
  start_on 1 ui ui "${common[@]}" --host "$zk_address" --port "$UI_PORT"

  # Hosts 2..N: a supervisor each. The hosts share this machine's CPUs, which each supervisor
  # would otherwise pin its workers to as if they were its own.
  for (( i = 2; i <= n; i++ )); do
    start_on "$i" "supervisor$i" supervisor "${common[@]}" --host "$(address "$i")" \
      --bind "$(address "$i")" --id "supervisor$i" --slots "$SLOTS" \
      --data-dir "$dir/supervisor$i" --no-pin-workers
  done
  for (( i = 2; i <= n; i++ )); do
    wait_for "supervisor$i" registering 60 \
      grep -q "supervisor supervisor$i on " "$dir/supervisor$i.log"
  done
  wait_for ui serving 30 grep -q "stormlet UI at " "$dir/ui.log"

  local workers=$(( (n - 1) * $(tr ',' '\n' <<<"$SLOTS" | wc -l) ))
  cat <<EOF

demo cluster up: $n hosts, logs and data in $dir
  host 1  $(namespace 1)  $(address 1)  ZooKeeper :$ZK_PORT, nimbus :$NIMBUS_PORT, UI :$UI_PORT
$(for (( i = 2; i <= n; i++ )); do
    echo "  host $i  $(namespace "$i")  $(address "$i")  supervisor$i, worker slots $SLOTS"
  done)

The UI: http://$zk_address:$UI_PORT/ (from this machine; its actions need the token that
  'stormlet secret ui-token --secret-file $secret' prints)

Submit from this machine, the client, through the bridge:
  export STORMLET_ZK=$zk STORMLET_SECRET_FILE=$secret
  stormlet submit topologies/word_count.py -c topology.workers=$(( workers < 2 ? workers : 2 ))
  stormlet list
  stormlet kill word_count
or from a host: ip netns exec $(namespace 1) stormlet list --zk $zk --secret-file $secret

$0 status shows what runs where; $0 down removes it all.
EOF
}

# ---------------------------------------------------------------------------------------------
# status

cmd_status() {
  (( $# == 0 )) || usage_error "status takes no arguments"
  require_root_and_ip status
  local -a hosts
  mapfile -t hosts < <(hosts_up | sort -V)
  if (( ${#hosts[@]} == 0 )); then
    info "no demo hosts up (none named $PREFIX-h*)"
    return 3
  fi
  local dir='' ns pid args what
  [[ -f $RECORD ]] && dir=$(<"$RECORD")
  echo "bridge $BRIDGE: $(ip -o -4 addr show dev "$BRIDGE" 2>/dev/null | awk '{print $4}')"
  for ns in "${hosts[@]}"; do
    local -a daemons=()
    while read -r pid args; do
      what=$(role "$args")
      [[ -n $what ]] && daemons+=("$what ($pid)")
    done < <(processes "$ns")
    local joined
    joined=$(IFS=,; echo "${daemons[*]:-nothing running}")
    printf '%s  %s  %s\n' "$ns" \
      "$(ip -n "$ns" -o -4 addr show dev eth0 2>/dev/null | awk '{print $4}')" "${joined//,/, }"
  done
  if [[ -n $dir && -f $dir/$MARK ]]; then
    local zk secret
    zk=$(sed -n 's/^ZK=//p' "$dir/$MARK")
    secret=$(sed -n 's/^SECRET=//p' "$dir/$MARK")
    echo "logs and data in $dir"
    stormlet --log-level WARNING list --zk "$zk" --secret-file "$secret" \
      || echo "$PROG: no answer from nimbus (see $dir/nimbus.log)" >&2
  fi
}

# ---------------------------------------------------------------------------------------------
# down

cmd_down() {
  (( $# == 0 )) || usage_error "down takes no arguments"
  require_root_and_ip down
  # SIGTERM first, so the daemons and ZooKeeper close as they would at a shutdown; then
  # whatever is left (workers a supervisor left running) is killed, the namespaces go (their
  # veths with them) and the bridge.
  bash "$NETNS" stop "$PREFIX-" 10
  bash "$NETNS" cleanup "$PREFIX-"
  if [[ -f $RECORD ]]; then
    local dir
    dir=$(<"$RECORD")
    # Only a directory `up` filled: the mark is its own.
    if [[ -n $dir && -f $dir/$MARK ]]; then
      rm -rf -- "$dir"
      info "removed $dir"
    fi
    rm -f -- "$RECORD"
    rmdir --ignore-fail-on-non-empty -- "${RECORD%/*}"
  fi
  info "demo hosts $PREFIX-* down"
}

# ---------------------------------------------------------------------------------------------

main() {
  (( $# )) || { usage >&2; exit 2; }
  check_settings
  local cmd=$1
  shift
  case $cmd in
    up) cmd_up "$@" ;;
    status) cmd_status "$@" ;;
    down) cmd_down "$@" ;;
    -h|--help|help) usage ;;
    *) usage_error "unknown command '$cmd'" ;;
  esac
}

main "$@"
