#!/usr/bin/env bash
# Tools for running stormlet hosts as Linux network namespaces (tests/multi_host.py).
#
#   deploy/netns.sh install          # apt-get install iproute2 and nftables when missing
#   deploy/netns.sh check            # exit 0 when namespaces can be made here, else say why
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
       $PROG check
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
  command -v nft >/dev/null 2>&1 || die "no 'nft' command: run '$0 install'"
  # A namespace made and deleted proves the kernel and our privileges allow it (a container
  # without CAP_SYS_ADMIN has root's uid and still cannot).
  local probe="slmhcheck$$"
  ip netns add "$probe" 2>/dev/null || die "'ip netns add' is not permitted here"
  ip netns delete "$probe"
  info "network namespaces available"
}

cmd_cleanup() {
  local prefix=${1:-}
  [[ -n $prefix ]] || { usage >&2; exit 2; }
  local ns link
  for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix" || true); do
    # Processes first: a namespace with live processes outlives `ip netns delete`.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns delete "$ns" && info "deleted namespace $ns"
  done
  for link in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$prefix" || true); do
    ip link delete "$link" 2>/dev/null && info "deleted link $link"
  done
}

case ${1:-} in
  install) cmd_install ;;
  check) cmd_check ;;
  cleanup) shift; cmd_cleanup "$@" ;;
  -h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac
