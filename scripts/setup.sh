#!/usr/bin/env bash
# One-command set-up on a fresh Debian machine: system packages, the Python package with its
# test dependencies, Debian's busybox-static for the real-program tests; then the bundled
# example runs (an s390x program on this x86_64 host).
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
if ! command -v qemu-s390x-static >/dev/null 2>&1; then
  $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq qemu-user-static uftrace >/dev/null
fi
python3 -m pip install -q -e '.[test]'
bash scripts/fetch_busybox.sh
echo "== bundled example: emutrace run testbins/s390x/calls recursion"
python3 -m emutrace run testbins/s390x/calls recursion
