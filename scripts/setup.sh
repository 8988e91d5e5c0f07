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
# Debian's cross sysroots (/usr/<triple>): the roots of the dynamic-binary tests (issue 15);
# the x86_64 programs use the host's own /.  Skipped when every one is present.
cross_libcs="libc6-arm64-cross libc6-armhf-cross libc6-i386-cross libc6-mips-cross libc6-mipsel-cross
  libc6-riscv64-cross libc6-powerpc-cross libc6-ppc64el-cross libc6-s390x-cross"
# shellcheck disable=SC2086
if ! dpkg-query -W $cross_libcs >/dev/null 2>&1; then
  $sudo apt-get update -qq || echo "apt-get update reported errors; continuing"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $cross_libcs >/dev/null
fi
python3 -m pip install -q -e '.[test]'
bash scripts/fetch_busybox.sh
# Tracing dynamic programs (issue 15): the cross binutils (objdump's @plt names are the oracle
# of PLT naming, objcopy/readelf split debug files in tests/test_debuginfo.py), and a Debian
# arm64 root with coreutils for tests/test_rootfs.py, made by `emutrace rootfs` once into
# .cache/rootfs/aarch64 (arm64 was added as a foreign architecture by fetch_busybox.sh).
cross_binutils="binutils-aarch64-linux-gnu binutils-arm-linux-gnueabihf binutils-i686-linux-gnu
  binutils-mips-linux-gnu binutils-mipsel-linux-gnu binutils-riscv64-linux-gnu
  binutils-powerpc-linux-gnu binutils-powerpc64le-linux-gnu binutils-s390x-linux-gnu"
# shellcheck disable=SC2086
if ! dpkg-query -W $cross_binutils >/dev/null 2>&1; then
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $cross_binutils >/dev/null
fi
if [ ! -f .cache/rootfs/aarch64/.emutrace-rootfs ]; then
  python3 -m emutrace rootfs --arch aarch64 -o .cache/rootfs/aarch64 coreutils
fi
echo "== bundled example: emutrace run testbins/s390x/calls recursion"
python3 -m emutrace run testbins/s390x/calls recursion
