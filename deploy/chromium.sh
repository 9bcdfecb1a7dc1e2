#!/usr/bin/env bash
# Install Debian's chromium for the UI's browser tests (tests/ui/test_ui_browser.py drives it with
# Playwright; Playwright's own browser downloads do not work here). Does nothing when
# /usr/bin/chromium is there already.
#
#   deploy/chromium.sh
#
# Exit status: 0 installed (or already there); 1 failure.
set -euo pipefail

readonly PROG=${0##*/}
readonly CHROMIUM=/usr/bin/chromium

die() { echo "$PROG: error: $*" >&2; exit 1; }
info() { echo "$PROG: $*"; }

if [[ -x $CHROMIUM ]]; then
  info "chromium already installed ($("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM"))"
  exit 0
fi
[[ $(id -u) -eq 0 ]] || die "installing packages needs root (run: sudo $0)"
command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install chromium by hand at $CHROMIUM"
info "installing chromium with apt-get"
apt-get update || die "apt-get update failed"
DEBIAN_FRONTEND=noninteractive apt-get install -y chromium || die "apt-get install chromium failed"
[[ -x $CHROMIUM ]] || die "package installed but $CHROMIUM is still missing"
info "installed $("$CHROMIUM" --version 2>/dev/null || echo chromium)"
