#!/usr/bin/env bash
# Tools for running stormlet hosts as Linux network namespaces (tests/multi_host.py,
# deploy/demo-hosts.sh).
#
#   deploy/netns.sh install          # apt-get install iproute2 and nftables when missing
#   deploy/netns.sh check [--without-nft]
#                                    # exit 0 when namespaces can be made here, else say why
#                                    # (nft is for the test harness's faults; the demo needs none)
#   deploy/netns.sh bridge NAME [ADDRESS/LEN]
#                                    # a bridge, up; with ADDRESS, this machine's on it
#   deploy/netns.sh host NAMESPACE BRIDGE VETH ADDRESS/LEN
#                                    # a host: a namespace whose eth0 has ADDRESS, the other
#                                    # end of its veth (named VETH) on BRIDGE
#   deploy/netns.sh stop PREFIX [SECS]
#                                    # SIGTERM every process in the namespaces named PREFIX*
#                                    # and wait up to SECS (default 10) for them to exit
#   deploy/netns.sh cleanup PREFIX   # delete every namespace, veth and bridge named PREFIX*
#
# `cleanup` is for a run that died too hard for its own teardown (kill -9 of pytest): the
# harness names everything it makes with a per-run prefix (e.g. `slmh1234a-`), so the prefix
# selects exactly one run's leftovers. It kills the processes still inside those namespaces.
#
# Exit status: 0 success; 1 failure; 2 usage error.
set -euo pipefail

readonly PROG=${0##*/}

die() { echo "$PROG: error: $*" >&2; exit 1; }
info() { echo "$PROG: $*"; }

usage() {
  cat <<EOF
usage: $PROG install
       $PROG check [--without-nft]
       $PROG bridge NAME [ADDRESS/LEN]
       $PROG host NAMESPACE BRIDGE VETH ADDRESS/LEN
       $PROG stop PREFIX [SECS]
       $PROG cleanup PREFIX
EOF
}

cmd_install() {
  local pkgs=()
  command -v ip >/dev/null 2>&1 || pkgs+=(iproute2)
  command -v nft >/dev/null 2>&1 || pkgs+=(nftables)
  if (( ${#pkgs[@]} == 0 )); then
    info "ip ($(command -v ip)) and nft ($(command -v nft)) already installed"
    return 0
  fi
  [[ $(id -u) -eq 0 ]] || die "installing packages needs root (run: sudo $0 install)"
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install ${pkgs[*]} by hand"
  info "installing ${pkgs[*]} with apt-get"
  apt-get update || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}" \
    || die "apt-get install ${pkgs[*]} failed"
  info "installed ${pkgs[*]}"
}

cmd_check() {
  [[ $(id -u) -eq 0 ]] || die "network namespaces need root"
  command -v ip >/dev/null 2>&1 || die "no 'ip' command: run '$0 install'"
  if [[ ${1:-} != --without-nft ]]; then
    command -v nft >/dev/null 2>&1 || die "no 'nft' command: run '$0 install'"
  fi
  # A namespace made and deleted proves the kernel and our privileges allow it (a container
  # without CAP_SYS_ADMIN has root's uid and still cannot).
  local probe="slmhcheck$$"
  ip netns add "$probe" 2>/dev/null || die "'ip netns add' is not permitted here"
  ip netns delete "$probe"
  info "network namespaces available"
}

cmd_bridge() {
  local name=${1:-} address=${2:-}
  [[ -n $name && $# -le 2 ]] || { usage >&2; exit 2; }
  ip link add "$name" type bridge
  ip link set "$name" up
  if [[ -n $address ]]; then ip addr add "$address" dev "$name"; fi
}

cmd_host() {
  (( $# == 4 )) || { usage >&2; exit 2; }
  local ns=$1 bridge=$2 veth=$3 address=$4
  ip netns add "$ns"
  # The veth's inner end is made inside the namespace, already named eth0.
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$bridge" up
  ip -n "$ns" addr add "$address" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
}

prefixed() {  # the lines of stdin that start with $1 (taken literally)
  awk -v p="$1" 'index($0, p) == 1'
}

namespaces() {  # the namespaces named $1*
  ip netns list | awk '{print $1}' | prefixed "$1"
}

pids_in() {  # the pids of every process in the namespaces given
  local ns
  for ns in "$@"; do ip netns pids "$ns" 2>/dev/null || true; done
}

cmd_stop() {
  local prefix=${1:-} secs=${2:-10} i
  [[ -n $prefix && $secs =~ ^[0-9]+$ ]] || { usage >&2; exit 2; }
  local -a all
  mapfile -t all < <(namespaces "$prefix")
  (( ${#all[@]} )) || return 0
  pids_in "${all[@]}" | xargs -r kill -TERM 2>/dev/null || true
  for (( i = 0; i < secs * 10; i++ )); do
    [[ -n $(pids_in "${all[@]}") ]] || return 0
    sleep 0.1
  done
  info "processes still running in ${all[*]} after ${secs}s: $(pids_in "${all[@]}" | xargs)"
}

cmd_cleanup() {
  local prefix=${1:-}
  [[ -n $prefix ]] || { usage >&2; exit 2; }
  local ns link i
  for ns in $(namespaces "$prefix"); do
    # Processes first: a namespace with live processes outlives `ip netns delete`. Again until
    # none is left: a supervisor may start a worker between listing and killing.
    for (( i = 0; i < 50; i++ )); do
      [[ -n $(pids_in "$ns") ]] || break
      pids_in "$ns" | xargs -r kill -KILL 2>/dev/null || true
      sleep 0.1
    done
    if [[ -n $(pids_in "$ns") ]]; then
      info "processes in $ns survive SIGKILL: $(pids_in "$ns" | xargs)"
    fi
    if ip netns delete "$ns"; then info "deleted namespace $ns"; fi
  done
  # A namespace's veth goes with it, perhaps only after this listing: deleting it may fail.
  for link in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | prefixed "$prefix"); do
    if ip link delete "$link" 2>/dev/null; then info "deleted link $link"; fi
  done
}

case ${1:-} in
  install) cmd_install ;;
  check) shift; cmd_check "$@" ;;
  bridge) shift; cmd_bridge "$@" ;;
  host) shift; cmd_host "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  cleanup) shift; cmd_cleanup "$@" ;;
  -h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac
